// The audit log as the configuration's [audit] section describes it, for the server and for
// the CLI commands that change things (keys, model aliases).
//
//   PILLAR_ASSIGN_OR_RETURN(auto log, OpenAuditLog(config, &metrics, /*server=*/true));
//   PILLAR_RETURN_IF_ERROR(AuditChange(config, {.kind = EventKind::kKey, ...}));
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

// Records one change made from the command line (principal: LocalOperator(), now) and waits
// until it is durable.
absl::Status AuditChange(const Config& config, audit::EventKind kind, std::string_view action,
                         std::string_view resource, const std::string& reason);

// "local:<user>": who ran a CLI command, as the operating system says.
std::string LocalOperator();

}  // namespace pillar::app
