#include "ckpt/run_directory.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/time/clock.h"
#include "ckpt/checkpoint_format.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::ckpt {

std::string StepDirName(int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < size_t(format::kStepDigits)) {
    digits.insert(0, size_t(format::kStepDigits) - digits.size(), '0');
  }
  return StrCat(format::kStepPrefix, digits);
}

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  if (name.substr(0, format::kStepPrefix.size()) != format::kStepPrefix) return std::nullopt;
  const std::string_view digits = name.substr(format::kStepPrefix.size());
  int64_t step;
  if (digits.size() < size_t(format::kStepDigits) || !ParseInt(digits, &step) || step < 0 ||
      StepDirName(step) != name) {
    return std::nullopt;
  }
  return step;
}

std::optional<SetAsideName> ParseSetAsideName(std::string_view name) {
  const size_t mark = name.find(format::kBrokenSuffix);
  if (mark == std::string_view::npos) return std::nullopt;
  SetAsideName parsed;
  std::optional<int64_t> step = ParseStepDirName(name.substr(0, mark));
  if (!step) return std::nullopt;
  parsed.step = *step;
  std::string_view when = name.substr(mark + format::kBrokenSuffix.size());
  std::string_view n;
  if (const size_t dash = when.find('-'); dash != std::string_view::npos) {
    n = when.substr(dash + 1);
    when = when.substr(0, dash);
    if (!ParseInt(n, &parsed.n) || parsed.n < 1) return std::nullopt;
  }
  if (!ParseInt(when, &parsed.unix_seconds) || parsed.unix_seconds < 0) return std::nullopt;
  // Only the names SetAside writes: no sign, no leading zeros, nothing after.
  if (StrCat(StepDirName(parsed.step), format::kBrokenSuffix, parsed.unix_seconds,
             parsed.n > 0 ? StrCat("-", parsed.n) : std::string()) != name) {
    return std::nullopt;
  }
  return parsed;
}

namespace {

// What a crash mid-save leaves: a step's `.tmp` directory (WriteCheckpoint, CopyCheckpoint) or
// the pointer's `latest.tmp.<16 hex digits>` (PublishAtomically). Nothing else is the run's to
// remove (review helper-121: every `*.tmp` of a directory given by mistake was removed).
bool LeftByACrash(std::string_view name) {
  if (name.ends_with(format::kTmpSuffix)) {
    return ParseStepDirName(name.substr(0, name.size() - format::kTmpSuffix.size())).has_value();
  }
  const std::string pointer_tmp = StrCat(format::kLatestFile, ".tmp.");
  if (!name.starts_with(pointer_tmp)) return false;
  const std::string_view hex = name.substr(pointer_tmp.size());
  return hex.size() == 16 && std::all_of(hex.begin(), hex.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

bool IsCheckpointDamage(const absl::Status& status) {
  return absl::IsDataLoss(status) || absl::IsNotFound(status) ||
         absl::IsInvalidArgument(status);  // a MANIFEST that is a directory, or past the cap
}

absl::Status RunDirectory::Lock() {
  if (lock_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      env_->LockFile(StrCat(root_, "/", format::kLockFile));
  if (absl::IsFailedPrecondition(lock.status())) {
    return absl::FailedPreconditionError(
        StrCat("the run directory ", root_,
               " is in use by another process (a trainer, or a restore, import or prune)"));
  }
  if (!lock.ok()) return lock.status();
  lock_ = std::move(*lock);
  return absl::OkStatus();
}

absl::Status RunDirectory::Prepare() {
  if (absl::Status s = env_->CreateDir(root_); !s.ok()) return s;
  if (absl::Status s = Lock(); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> names = env_->ListDir(root_);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (!LeftByACrash(name)) continue;
    if (absl::Status s = env_->RemoveAll(root_ + "/" + name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> RunDirectory::Steps() const {
  absl::StatusOr<std::vector<std::string>> names = env_->ListDir(root_);
  if (!names.ok()) return names.status();
  std::vector<int64_t> steps;
  for (const std::string& name : *names) {
    if (std::optional<int64_t> step = ParseStepDirName(name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<int64_t>> RunDirectory::Latest() const {
  const std::string path = root_ + "/" + std::string(format::kLatestFile);
  if (!env_->Exists(path)) return std::optional<int64_t>();
  absl::StatusOr<std::string> text = ReadWholeFile(*env_, path, 256);
  if (!text.ok()) return text.status();
  std::string_view name = *text;
  if (!name.empty() && name.back() == '\n') name.remove_suffix(1);
  std::optional<int64_t> step = ParseStepDirName(name);
  if (!step) return absl::DataLossError(StrCat(path, ": not a step name"));
  return step;
}

absl::Status RunDirectory::PublishLatest(int64_t step) {
  return PublishAtomically(*env_, root_ + "/" + std::string(format::kLatestFile),
                           StepDirName(step) + "\n", 0600);
}

[[nodiscard]] absl::Status CheckStepName(const std::string& dir, const Manifest& manifest) {
  std::filesystem::path path(dir);
  if (path.filename().empty()) path = path.parent_path();  // "run/step-00000300/"
  const std::optional<int64_t> named = ParseStepDirName(path.filename().string());
  if (named && *named != manifest.step) {
    return absl::DataLossError(StrCat(dir, "/", format::kManifestFile, ": says step ",
                                      manifest.step, ", not its directory's"));
  }
  return absl::OkStatus();
}

namespace {

// A step that stopped a walk for a reason other than damage, and what to do about it.
[[nodiscard]] absl::Status Unreadable(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), StrCat(path, " cannot be read (", status.message(),
                                            "): fix that, or move it away"));
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> RunDirectory::Load(int64_t step, int threads) const {
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(*env_, StepPath(step), threads);
  if (!loaded.ok()) return loaded;
  PILLAR_RETURN_IF_ERROR(CheckStepName(StepPath(step), loaded->manifest()));
  verified_.insert(step);
  return loaded;
}

absl::Status RunDirectory::Verify(int64_t step, int threads) const {
  absl::StatusOr<Manifest> manifest = ReadManifest(*env_, StepPath(step));
  if (!manifest.ok()) return manifest.status();
  PILLAR_RETURN_IF_ERROR(CheckStepName(StepPath(step), *manifest));
  absl::Status verified = VerifyCheckpoint(*env_, StepPath(step), *manifest, threads);
  if (verified.ok()) verified_.insert(step);
  return verified;
}

absl::StatusOr<LoadedCheckpoint> RunDirectory::LoadLatest(std::vector<std::string>* skipped,
                                                          int threads) const {
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) {
    if (absl::IsNotFound(steps.status())) return absl::NotFoundError("no checkpoints");
    return steps.status();
  }
  // Without steps there is nothing to load, whatever the pointer says (review helper-123: a
  // run holding only a garbled `latest` was refused as one whose checkpoints all failed).
  if (steps->empty()) return absl::NotFoundError("no checkpoints");
  // The pointer is a hint: a crash between publishing a checkpoint and moving `latest` leaves
  // a newer complete one, and a damaged newest one must not stop the walk back.
  absl::StatusOr<std::optional<int64_t>> latest = Latest();
  if (!latest.ok() && skipped != nullptr) {
    skipped->push_back(StrCat("latest: ", latest.status().message()));
  }
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    absl::StatusOr<LoadedCheckpoint> loaded = Load(*it, threads);
    if (loaded.ok()) return loaded;
    if (!IsCheckpointDamage(loaded.status())) return Unreadable(StepPath(*it), loaded.status());
    damaged_.insert(*it);
    if (skipped != nullptr) {
      skipped->push_back(StrCat(StepDirName(*it), ": ", loaded.status().message()));
    }
  }
  return absl::NotFoundError("no checkpoint loads and verifies");
}

absl::StatusOr<std::string> RunDirectory::SetAside(int64_t step) {
  if (absl::Status s = Lock(); !s.ok()) return s;
  const int64_t now_s = absl::ToUnixSeconds(absl::Now());
  std::string aside = StrCat(StepPath(step), format::kBrokenSuffix, now_s);
  // A free name: a link planted there, even a dangling one, is a name taken (review helper-122).
  for (int n = 1; env_->Exists(aside) || env_->IsLink(aside); ++n) {
    aside = StrCat(StepPath(step), format::kBrokenSuffix, now_s, "-", n);
  }
  if (absl::Status s = env_->Rename(StepPath(step), aside); !s.ok()) return s;
  verified_.erase(step);
  damaged_.erase(step);
  if (absl::Status s = env_->SyncDir(root_); !s.ok()) return s;
  return aside;
}

absl::StatusOr<std::vector<std::string>> RunDirectory::SetAsideNewerThan(int64_t step) {
  if (absl::Status s = Lock(); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) return steps.status();
  std::vector<std::string> moved;
  for (int64_t newer : *steps) {
    if (newer <= step) continue;
    // Only what is damaged (or missing a file): a step that could not be read for another
    // reason (permissions, an I/O error, no descriptors left) stops the caller instead of being
    // taken for damage (review helper-122: a run another user wrote was set aside whole).
    // (What LoadLatest found damaged is not read again.)
    if (!damaged_.contains(newer)) {
      if (absl::Status s = Verify(newer); !IsCheckpointDamage(s)) {
        if (s.ok()) continue;
        return Unreadable(StepPath(newer), s);
      }
    }
    absl::StatusOr<std::string> aside = SetAside(newer);
    if (!aside.ok()) return aside.status();
    moved.push_back(std::move(*aside));
  }
  return moved;
}

absl::StatusOr<Pruned> RunDirectory::Prune(const Retention& retention,
                                           std::optional<int64_t> known_good) {
  if (absl::Status s = Lock(); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) return steps.status();
  if (known_good) verified_.insert(*known_good);
  // From the newest down until `keep_last` checkpoints that verify are found (review helpers 121
  // and 122: damaged or empty directories counted among the ones kept, and good ones went).
  // Damaged ones above the newest good one are left as they are; damaged ones below it count
  // for nothing and go; one that could not be read for another reason is not ours to judge.
  std::set<int64_t> keep;
  int64_t good = 0;
  std::optional<int64_t> newest_good;
  for (size_t i = steps->size(); i-- > 0 && good < std::max(1, retention.keep_last);) {
    const int64_t step = (*steps)[i];
    const absl::Status verified = verified_.contains(step) ? absl::OkStatus() : Verify(step);
    if (verified.ok()) {
      keep.insert(step);
      ++good;
      if (!newest_good) newest_good = step;
    } else if (!IsCheckpointDamage(verified) || !newest_good) {
      keep.insert(step);
    }
  }
  if (!newest_good && !steps->empty()) {
    return absl::FailedPreconditionError(
        StrCat("no checkpoint of ", root_, " verifies: nothing removed"));
  }
  for (int64_t step : *steps) {
    if (retention.keep_every > 0 && step % retention.keep_every == 0) keep.insert(step);
  }
  absl::StatusOr<std::optional<int64_t>> latest = Latest();
  if (latest.ok() && latest->has_value()) keep.insert(**latest);
  Pruned pruned;
  for (int64_t step : *steps) {
    if (keep.contains(step)) continue;
    if (absl::Status s = env_->RemoveAll(StepPath(step)); !s.ok()) return s;
    pruned.steps.push_back(step);
  }
  if (absl::Status s = PruneSetAside(retention.keep_set_aside, pruned); !s.ok()) return s;
  if (!pruned.steps.empty() || !pruned.set_aside.empty()) {
    if (absl::Status s = env_->SyncDir(root_); !s.ok()) return s;
  }
  return pruned;
}

absl::Status RunDirectory::PruneSetAside(int keep, Pruned& pruned) {
  absl::StatusOr<std::vector<std::string>> names = env_->ListDir(root_);
  if (!names.ok()) return names.status();
  std::vector<std::pair<SetAsideName, std::string>> aside;
  for (std::string& name : *names) {
    if (std::optional<SetAsideName> parsed = ParseSetAsideName(name)) {
      aside.emplace_back(*parsed, std::move(name));
    }
  }
  // Newest first: by when it was set aside, then by the order within that second.
  std::sort(aside.begin(), aside.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.unix_seconds, a.first.n, a.first.step) >
           std::tie(b.first.unix_seconds, b.first.n, b.first.step);
  });
  for (size_t i = size_t(std::max(0, keep)); i < aside.size(); ++i) {
    // A link planted at such a name goes as a link: RemoveAll does not follow it. One that
    // cannot be removed stays, said (review helper-127: its error stopped the trainer's saves).
    if (absl::Status s = env_->RemoveAll(root_ + "/" + aside[i].second); !s.ok()) {
      pruned.not_removed.push_back(StrCat(aside[i].second, ": ", s.message()));
      continue;
    }
    pruned.set_aside.push_back(std::move(aside[i].second));
  }
  return absl::OkStatus();
}

}  // namespace pillar::ckpt
