#include "runtime/model_reverifier.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/time/clock.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "models/model_repository.h"
#include "signing/model_manifest.h"

namespace pillar::runtime {

ModelReverifier::ModelReverifier(const ModelCatalog& catalog,
                                 std::vector<signing::PublicKey> trusted, absl::Duration interval,
                                 absl::Duration watch_interval, audit::AuditSink& audit)
    : catalog_(catalog),
      trusted_(std::move(trusted)),
      interval_(interval),
      watch_interval_(watch_interval),
      audit_(audit) {}

ModelReverifier::~ModelReverifier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ModelReverifier::Start() {
  thread_ = std::thread([this] {
    NameThisThread("reverifier");
    absl::Time next_full = absl::Now() + interval_;
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      absl::Time wake = next_full;
      if (watch_interval_ > absl::ZeroDuration()) {
        wake = std::min(wake, absl::Now() + watch_interval_);
      }
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
      if (stopping_) break;
      mu_.Unlock();
      if (absl::Now() >= next_full) {
        CheckNow();
        next_full = absl::Now() + interval_;
      } else {
        CheckChanged();
      }
      mu_.Lock();
    }
  });
}

namespace {

// What changes when any file of a version does: every regular file's path, size, inode,
// modification and change time. A stat per file, no reading: cheap enough to run every second.
// Nothing when it could not be listed for a shortage (out of descriptors): that says nothing of
// the files. Any other error listing it (gone, unreadable) is a fingerprint of its own, a change
// that the full check then judges.
std::optional<std::string> Fingerprint(const std::filesystem::path& dir) {
  std::vector<std::string> entries;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::directory_entry& entry = *it;
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) != 0) continue;
    // ctime too: whoever edits a file in place can set its mtime back (utime), never its
    // ctime, which every write and every utime moves.
    entries.push_back(StrCat(entry.path().string(), "\t", int64_t(st.st_size), "\t",
                             uint64_t(st.st_ino), "\t", int64_t(st.st_mtim.tv_sec), ".",
                             int64_t(st.st_mtim.tv_nsec), "\t", int64_t(st.st_ctim.tv_sec), ".",
                             int64_t(st.st_ctim.tv_nsec), "\t", uint32_t(st.st_mode)));
  }
  if (ec) {
    if (IsResourceShortage(ec.value())) return std::nullopt;
    return StrCat("cannot list: ", ec.message(), "\n");
  }
  std::sort(entries.begin(), entries.end());
  std::string out;
  for (const std::string& e : entries) StrAppend(&out, e, "\n");
  return out;
}

}  // namespace

int ModelReverifier::CheckChanged() {
  int withdrawn = 0;
  const std::shared_ptr<const ModelRegistry> registry = catalog_.Current();
  std::map<std::string, std::string> seen;
  for (const auto& v : registry->versions()) {
    if (!v->ready()) continue;
    std::optional<std::string> fingerprint = Fingerprint(v->directory);
    auto known = fingerprints_.find(v->directory.string());
    if (!fingerprint) {  // not read this time: the last one stands
      if (known != fingerprints_.end()) seen[known->first] = known->second;
      continue;
    }
    // A version seen for the first time was verified when it loaded.
    const bool changed = known != fingerprints_.end() && known->second != *fingerprint;
    seen[v->directory.string()] = *std::move(fingerprint);
    if (changed && !CheckVersion(*v)) ++withdrawn;
  }
  fingerprints_ = std::move(seen);
  return withdrawn;
}

int ModelReverifier::CheckNow() {
  int withdrawn = 0;
  const std::shared_ptr<const ModelRegistry> registry = catalog_.Current();
  for (const auto& v : registry->versions()) {
    if (v->ready() && !CheckVersion(*v)) ++withdrawn;
  }
  return withdrawn;
}

bool ModelReverifier::CheckVersion(ModelVersion& v) {
  absl::StatusOr<signing::VerifiedModel> verified = signing::VerifyModel(
      v.directory.string(), trusted_,
      {.expected_name = models::VersionSubject(v.name, v.version), .keep = {}, .after_read = {}});
  // What is served was loaded from bytes verified at load time, so a change on disk cannot
  // reach it; but the store no longer holds what is being served, and that is an alarm. The
  // same goes for files re-signed in place with different content: the served bytes are no
  // longer what the store says this version is.
  std::string reason;
  if (!verified.ok() && absl::IsResourceExhausted(verified.status())) {
    // Out of descriptors or memory: the files could not be read, which says nothing of them.
    std::fprintf(stderr, "pillar: model %s version %lld: its files cannot be checked now (%s)\n",
                 v.name.c_str(), static_cast<long long>(v.version),
                 std::string(verified.status().message()).c_str());
    return true;
  }
  if (!verified.ok()) {
    reason = StrCat("signature check failed while serving: ", verified.status().message());
  } else if (!v.root_digest.empty() && verified->root_digest != v.root_digest) {
    reason = StrCat("the store's files for this version now have root digest ",
                    verified->root_digest, ", not the ", v.root_digest, " that was loaded");
  } else {
    return true;
  }
  v.Withdraw(reason);
  std::fprintf(stderr, "pillar: ALERT: model %s version %lld withdrawn: %s\n", v.name.c_str(),
               static_cast<long long>(v.version), reason.c_str());
  audit_.Record({.kind = audit::EventKind::kModel,
                 .allowed = false,
                 .time_us = absl::GetCurrentTimeNanos() / 1000,
                 .principal = "pillar",
                 .tenant = {},
                 .action = "withdraw",
                 .resource = v.resource,
                 .request_id = {},
                 .remote = {},
                 .explain = [&] { return reason; }});
  return false;
}

}  // namespace pillar::runtime
