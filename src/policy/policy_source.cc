#include "policy/policy_source.h"

#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/strings.h"

namespace pillar::policy {

constexpr uintmax_t kMaxPolicyBytes = 4 << 20;

absl::StatusOr<std::unique_ptr<PolicySource>> PolicySource::Open(const std::string& path,
                                                                 absl::Duration reload_interval,
                                                                 audit::AuditSink* audit) {
  if (path.empty()) return std::make_unique<PolicySource>(Policy::BuiltIn());
  std::unique_ptr<PolicySource> source(new PolicySource);
  source->audit_ = audit;
  PolicySource* raw = source.get();
  source->watcher_ = std::make_unique<FileWatcher>(
      path, "policy", reload_interval, kMaxPolicyBytes,
      [raw, path](const std::string& text) { return raw->Apply(path, text); });
  if (absl::Status s = source->watcher_->LoadNow(); !s.ok()) return s;
  if (reload_interval > absl::ZeroDuration()) source->watcher_->Start();
  return source;
}

absl::Status PolicySource::Apply(const std::string& path, const std::string& text) {
  absl::StatusOr<std::shared_ptr<const Policy>> policy = Policy::Parse(text, path);
  if (audit_ != nullptr) {
    const std::string reason =
        policy.ok() ? StrCat("sha256 ", HexEncode(Sha256(text)))
                    : StrCat("refused, the previous policy stays: ", policy.status().message());
    audit_->Record({.kind = audit::EventKind::kPolicy,
                    .allowed = policy.ok(),
                    .time_us = absl::GetCurrentTimeNanos() / 1000,
                    .principal = "pillar",
                    .tenant = {},
                    .action = "load",
                    .resource = path,
                    .request_id = {},
                    .remote = {},
                    .explain = [&] { return reason; }});
  }
  if (!policy.ok()) return policy.status();
  absl::MutexLock lock(&mu_);
  current_ = std::move(*policy);
  return absl::OkStatus();
}

}  // namespace pillar::policy
