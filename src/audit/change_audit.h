// The audit of a change made from the command line (a key, a model version, an alias), recorded
// before the change is made.
//
//   PILLAR_ASSIGN_OR_RETURN(ChangeAudit audit, ChangeAudit::Open(config.audit));
//   PILLAR_RETURN_IF_ERROR(audit.Record(EventKind::kKey, "revoke", "key:6f97fb44ae6b", ""));
//   if (absl::Status s = MakeTheChange(); !s.ok()) {
//     (void)audit.RecordFailed(EventKind::kKey, "revoke", "key:6f97fb44ae6b", s);
//     return s;
//   }
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "audit/audit_config.h"
#include "audit/audit_log.h"

namespace pillar::audit {

// The audit log of a change made from the command line. The change is recorded, and the record
// made durable, before the change is made: when it cannot be audited (an unwritable log, a
// chain whose end does not verify) it is refused instead of made unaudited. A change that then
// fails gets a second record saying so. A crash between the two leaves a record of a change
// that was not made, never a change without a record.
class ChangeAudit {
 public:
  [[nodiscard]] static absl::StatusOr<ChangeAudit> Open(const AuditConfig& config);
  // Records the change about to be made (decision "ok"; principal: LocalOperator(), now) and
  // waits until the record is durable. Call it BEFORE making the change, naming everything the
  // change will name (a new key's id: generate it first); an error means: do not make it.
  // On an error the record is abandoned (AuditLog::Abandon): it is never written afterwards,
  // when the log's lock or the disk frees up, so the log does not say "ok" for a change that
  // was not made. (An append already under way when the wait ran out completes; the error then
  // says that the log may hold the record.) This ChangeAudit records nothing more after that.
  [[nodiscard]] absl::Status Record(EventKind kind, std::string_view action,
                                    std::string_view resource, const std::string& reason);
  // After Record(), when making the change failed: records the same action on the same resource
  // with decision "failed" and `error`'s message as the reason. Best effort (waits a few
  // seconds at most): the caller reports the change's own error either way.
  [[nodiscard]] absl::Status RecordFailed(EventKind kind, std::string_view action,
                                          std::string_view resource, const absl::Status& error);

 private:
  explicit ChangeAudit(std::unique_ptr<AuditLog> log) : log_(std::move(log)) {}
  [[nodiscard]] absl::Status Append(EventKind kind, bool ok, std::string_view action,
                                    std::string_view resource, std::string_view reason,
                                    absl::Duration timeout);
  std::unique_ptr<AuditLog> log_;  // null: [audit] backend = "off"
  bool abandoned_ = false;         // a Record() failed and log_ was abandoned
};

// "local:<user>": who ran a CLI command, as the operating system says.
std::string LocalOperator();

}  // namespace pillar::audit
