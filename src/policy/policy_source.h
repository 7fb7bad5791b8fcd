// The policy in force: the built-in one, or a file that is reloaded when it changes. A new
// file that does not parse, or that a user other than pillar's (or root) owns or group or others
// may write, is refused, logged, counted, and the old policy stays.
//
//   auto source = PolicySource::Open("policy.toml", absl::Seconds(1));
//   std::shared_ptr<const Policy> policy = (*source)->Current();   // hot path: one refcount
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "audit/audit_sink.h"
#include "common/file_watcher.h"
#include "policy/policy.h"

namespace pillar::policy {

class PolicySource {
 public:
  // `path` empty: the built-in policy, never reloaded. Otherwise the file must load now. Each
  // file taken into service or refused is an audit event (kind policy) when `audit` is given.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PolicySource>> Open(
      const std::string& path, absl::Duration reload_interval, audit::AuditSink* audit = nullptr);
  // A fixed policy (tests, benchmarks).
  explicit PolicySource(std::shared_ptr<const Policy> fixed) : current_(std::move(fixed)) {}

  std::shared_ptr<const Policy> Current() const {
    absl::ReaderMutexLock lock(&mu_);
    return current_;
  }
  int64_t reloads() const { return watcher_ ? watcher_->reloads() : 0; }
  int64_t failures() const { return watcher_ ? watcher_->failures() : 0; }

 private:
  PolicySource() = default;
  [[nodiscard]] absl::Status Apply(const std::string& path, const std::string& text);
  void AuditLoad(const std::string& path, bool allowed, const std::string& reason);

  mutable absl::Mutex mu_;
  std::shared_ptr<const Policy> current_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<FileWatcher> watcher_;
  audit::AuditSink* audit_ = nullptr;
};

}  // namespace pillar::policy
