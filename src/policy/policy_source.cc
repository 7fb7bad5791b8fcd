#include "policy/policy_source.h"

#include <cstdio>

#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/files.h"
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
  // It decides who may do what: it must be as protected as pillar.toml (owned by pillar's user
  // or root, written by nobody else), checked on the descriptor that is read.
  source->watcher_ = std::make_unique<FileWatcher>(
      path, "policy", reload_interval, kMaxPolicyBytes,
      [raw, path](const std::string& text) { return raw->Apply(path, text); },
      [raw, path](const std::filesystem::path& file, std::uintmax_t max_bytes) {
        absl::StatusOr<std::string> text = ReadTrustedFile(file, max_bytes);
        if (text.status().code() == absl::StatusCode::kPermissionDenied) {
          raw->AuditLoad(path, false,
                         StrCat("refused, the previous policy stays: ", text.status().message()));
        }
        return text;
      });
  if (absl::Status s = source->watcher_->LoadNow(); !s.ok()) return s;
  if (reload_interval > absl::ZeroDuration()) source->watcher_->Start();
  return source;
}

absl::Status PolicySource::Apply(const std::string& path, const std::string& text) {
  absl::StatusOr<std::shared_ptr<const Policy>> policy = Policy::Parse(text, path);
  AuditLoad(path, policy.ok(),
            policy.ok()
                ? StrCat("sha256 ", HexEncode(Sha256(text)))
                : StrCat("refused, the previous policy stays: ", policy.status().message()));
  if (!policy.ok()) return policy.status();
  // What `pillar policy validate` warns of, said where an operator who never ran it looks.
  for (const std::string& w : PolicyWarnings(**policy)) {
    std::fprintf(stderr, "pillar: %s\n", w.c_str());
  }
  absl::MutexLock lock(&mu_);
  current_ = std::move(*policy);
  return absl::OkStatus();
}

void PolicySource::AuditLoad(const std::string& path, bool allowed, const std::string& reason) {
  if (audit_ == nullptr) return;
  audit_->Record({.kind = audit::EventKind::kPolicy,
                  .allowed = allowed,
                  .time_us = absl::GetCurrentTimeNanos() / 1000,
                  .principal = "pillar",
                  .tenant = {},
                  .action = "load",
                  .resource = path,
                  .request_id = {},
                  .remote = {},
                  .explain = [&] { return reason; }});
}

}  // namespace pillar::policy
