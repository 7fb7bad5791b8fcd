// The audit log as the configuration's [audit] section describes it, for the server and for
// the CLI commands that change things (keys, model aliases).
//
//   PILLAR_ASSIGN_OR_RETURN(auto log, OpenAuditLog(config, &metrics, /*server=*/true));
//
//   PILLAR_ASSIGN_OR_RETURN(ChangeAudit audit, ChangeAudit::Open(config));   // before the change
//   ... make the change ...
//   PILLAR_RETURN_IF_ERROR(audit.Record(EventKind::kKey, "revoke", "key:6f97fb44ae6b", ""));
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "app/config.h"
#include "audit/audit_log.h"
#include "monitor/metrics.h"

namespace pillar::app {

// Null when [audit] backend = "off". `server`: this process signs checkpoints (when a
// signing_key is configured); CLI commands only append, the server signs what they wrote.
absl::StatusOr<std::unique_ptr<audit::AuditLog>> OpenAuditLog(const Config& config,
                                                              monitor::MetricsRegistry* metrics,
                                                              bool server);

// The audit log of a change made from the command line, opened before the change is made: when
// the change could not be audited (an unwritable log, a chain whose end does not verify) it is
// refused instead of made unaudited.
class ChangeAudit {
 public:
  static absl::StatusOr<ChangeAudit> Open(const Config& config);
  // Records the change (principal: LocalOperator(), now) and waits until it is durable.
  absl::Status Record(audit::EventKind kind, std::string_view action, std::string_view resource,
                      const std::string& reason);

 private:
  explicit ChangeAudit(std::unique_ptr<audit::AuditLog> log) : log_(std::move(log)) {}
  std::unique_ptr<audit::AuditLog> log_;  // null: [audit] backend = "off"
};

// "local:<user>": who ran a CLI command, as the operating system says.
std::string LocalOperator();

}  // namespace pillar::app
