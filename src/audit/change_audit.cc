#include "audit/change_audit.h"

#include <pwd.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "common/strings.h"

namespace pillar::audit {

absl::StatusOr<ChangeAudit> ChangeAudit::Open(const AuditConfig& config) {
  absl::StatusOr<std::unique_ptr<AuditLog>> log = OpenAuditLog(config, nullptr, /*server=*/false);
  if (!log.ok()) {
    return absl::Status(
        log.status().code(),
        StrCat("the change is not made, it could not be audited: ", log.status().message()));
  }
  return ChangeAudit(std::move(*log));
}

absl::Status ChangeAudit::Record(EventKind kind, std::string_view action, std::string_view resource,
                                 const std::string& reason) {
  // A full disk may free up meanwhile: wait for it as long as Flush does by default.
  return Append(kind, /*ok=*/true, action, resource, reason, absl::Seconds(30));
}

absl::Status ChangeAudit::RecordFailed(EventKind kind, std::string_view action,
                                       std::string_view resource, const absl::Status& error) {
  // The change was not made; this record only completes the story of the first one, so it
  // does not hold the command up for long.
  const std::string reason(error.message());
  return Append(kind, /*ok=*/false, action, resource, reason, absl::Seconds(5));
}

absl::Status ChangeAudit::Append(EventKind kind, bool ok, std::string_view action,
                                 std::string_view resource, std::string_view reason,
                                 absl::Duration timeout) {
  if (log_ == nullptr) return absl::OkStatus();
  if (abandoned_) {
    return absl::FailedPreconditionError("the audit log was given up after a record failed");
  }
  const std::string who = LocalOperator();
  const bool accepted = log_->Record({.kind = kind,
                                      .allowed = ok,
                                      .time_us = absl::ToUnixMicros(absl::Now()),
                                      .principal = who,
                                      .tenant = {},
                                      .action = action,
                                      .resource = resource,
                                      .request_id = {},
                                      .remote = {},
                                      .explain = [reason] { return std::string(reason); }});
  if (!accepted) {
    // on_full = "refuse" with a full backlog (a failing store): say so rather than report a
    // change as audited that is not.
    return absl::UnavailableError("the audit log refused the record: its backlog is full");
  }
  absl::Status flushed = log_->Flush(timeout);
  // A "failed" record that is written late is still true; an "ok" one is not: the caller now
  // reports the change as not made. Left queued, the writer's retries (or the destructor, once
  // the lock or the disk frees up) would write it.
  if (flushed.ok() || !ok) return flushed;
  const AuditLog::Abandoned abandoned = log_->Abandon();
  abandoned_ = true;
  if (abandoned.written > 0) {
    return absl::Status(
        flushed.code(),
        StrCat(flushed.message(),
               "; the record's append was already under way and could not be "
               "withdrawn: the audit log may hold this change as made although it was not"));
  }
  return flushed;
}

std::string LocalOperator() {
  const struct passwd* user = ::getpwuid(::geteuid());
  return StrCat("local:", user != nullptr ? user->pw_name : std::to_string(::geteuid()));
}

}  // namespace pillar::audit
