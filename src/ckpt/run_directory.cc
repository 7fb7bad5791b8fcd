#include "ckpt/run_directory.h"

#include <algorithm>
#include <set>

#include "ckpt/checkpoint_format.h"
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

absl::Status RunDirectory::Prepare() {
  if (absl::Status s = env_->CreateDir(root_); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> names = env_->ListDir(root_);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (name.size() > format::kTmpSuffix.size() &&
        name.compare(name.size() - format::kTmpSuffix.size(), format::kTmpSuffix.size(),
                     format::kTmpSuffix) == 0) {
      if (absl::Status s = env_->RemoveAll(root_ + "/" + name); !s.ok()) return s;
    }
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

absl::StatusOr<LoadedCheckpoint> RunDirectory::LoadLatest(std::vector<std::string>* skipped,
                                                          int threads) const {
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) {
    if (absl::IsNotFound(steps.status())) return absl::NotFoundError("no checkpoints");
    return steps.status();
  }
  // The pointer is a hint: a crash between publishing a checkpoint and moving `latest` leaves
  // a newer complete one, and a damaged newest one must not stop the walk back.
  absl::StatusOr<std::optional<int64_t>> latest = Latest();
  if (!latest.ok() && skipped != nullptr) {
    skipped->push_back(StrCat("latest: ", latest.status().message()));
  }
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(*env_, StepPath(*it), threads);
    if (loaded.ok()) return loaded;
    if (skipped != nullptr) {
      skipped->push_back(StrCat(StepDirName(*it), ": ", loaded.status().message()));
    }
  }
  return absl::NotFoundError(steps->empty() ? "no checkpoints"
                                            : "no checkpoint loads and verifies");
}

absl::StatusOr<std::vector<int64_t>> RunDirectory::Prune(const Retention& retention) {
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) return steps.status();
  absl::StatusOr<std::optional<int64_t>> latest = Latest();
  std::set<int64_t> keep;
  for (size_t i = 0; i < steps->size(); ++i) {
    const int64_t step = (*steps)[i];
    const bool recent = int64_t(steps->size() - i) <= retention.keep_last;
    const bool milestone = retention.keep_every > 0 && step % retention.keep_every == 0;
    if (recent || milestone) keep.insert(step);
  }
  if (latest.ok() && latest->has_value()) keep.insert(**latest);
  std::vector<int64_t> removed;
  for (int64_t step : *steps) {
    if (keep.contains(step)) continue;
    if (absl::Status s = env_->RemoveAll(StepPath(step)); !s.ok()) return s;
    removed.push_back(step);
  }
  if (!removed.empty()) {
    if (absl::Status s = env_->SyncDir(root_); !s.ok()) return s;
  }
  return removed;
}

}  // namespace pillar::ckpt
