// The [audit] section of pillar.toml, and the audit log it describes, for the server and for
// the CLI commands that change things. Each key is described in docs/configuration.md.
//
//   PILLAR_ASSIGN_OR_RETURN(audit::AuditConfig config,
//                           audit::ReadAuditSection(root, "pillar.toml", base));
//   PILLAR_ASSIGN_OR_RETURN(auto log, audit::OpenAuditLog(config, &metrics, /*server=*/true));
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "audit/audit_log.h"
#include "monitor/metrics.h"

namespace pillar::audit {

struct AuditConfig {
  enum class Backend { kFile, kPostgres, kOff };
  // When records are made durable: after every batch, at most fsync_interval after their
  // write, or when the operating system decides.
  enum class Fsync { kBatch, kInterval, kOff };
  // What a record meets when queue_capacity records wait already: it is dropped (and counted),
  // or the request it describes is refused.
  enum class OnFull { kDrop, kRefuse };

  Backend backend = Backend::kFile;
  std::string file = "audit.log";
  std::string postgres;                  // a libpq connection string
  std::string instance;                  // the chain's name; empty: the host name
  std::string signing_key;               // Ed25519 private key for checkpoints; empty: none
  std::vector<std::string> public_keys;  // what `pillar audit verify` trusts
  absl::Duration checkpoint_interval = absl::Seconds(60);
  Fsync fsync = Fsync::kInterval;
  absl::Duration fsync_interval = absl::Milliseconds(10);
  absl::Duration batch_delay = absl::Milliseconds(2);  // AuditLogOptions::batch_delay
  size_t queue_capacity = 65536;
  OnFull on_full = OnFull::kDrop;
};

// Relative paths are taken from `base`.
[[nodiscard]] absl::StatusOr<AuditConfig> ReadAuditSection(const toml::table& root,
                                                           std::string_view source,
                                                           const std::string& base);

// Null when the backend is kOff. `server`: this process signs checkpoints (when a signing_key
// is configured); CLI commands only append, the server signs what they wrote.
[[nodiscard]] absl::StatusOr<std::unique_ptr<AuditLog>> OpenAuditLog(
    const AuditConfig& config, monitor::MetricsRegistry* metrics, bool server);

}  // namespace pillar::audit
