// OpenAuditLog (audit_config.h), apart from the parsing so that the configuration fuzzer links
// no store.
#include "audit/audit_config.h"
#include "audit/file_audit_store.h"
#include "audit/postgres_audit_store.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::audit {

[[nodiscard]] absl::StatusOr<std::unique_ptr<AuditLog>> OpenAuditLog(
    const AuditConfig& config, monitor::MetricsRegistry* metrics, bool server) {
  using C = AuditConfig;
  if (config.backend == C::Backend::kOff) return nullptr;
  AuditLogOptions options;
  options.instance = config.instance.empty() ? DefaultInstanceName() : config.instance;
  options.checkpoint_interval = config.checkpoint_interval;
  options.batch_delay = config.batch_delay;
  options.fsync_interval = config.fsync == C::Fsync::kBatch ? absl::ZeroDuration()
                           : config.fsync == C::Fsync::kOff ? absl::InfiniteDuration()
                                                            : config.fsync_interval;
  options.queue_capacity = config.queue_capacity;
  options.refuse_when_full = config.on_full == C::OnFull::kRefuse;
  options.metrics = metrics;
  if (server && !config.signing_key.empty()) {
    absl::StatusOr<signing::SigningKey> key = signing::ReadPrivateKey(config.signing_key);
    if (!key.ok()) {
      return absl::Status(key.status().code(),
                          StrCat("[audit] signing_key: ", key.status().message()));
    }
    options.checkpoint_key = std::move(*key);
  }
  std::unique_ptr<AuditStore> store;
  if (config.backend == C::Backend::kPostgres) {
    PILLAR_ASSIGN_OR_RETURN(store, PostgresAuditStore::Open(config.postgres, options.instance));
  } else {
    PILLAR_ASSIGN_OR_RETURN(store, FileAuditStore::Open(config.file));
  }
  return AuditLog::Start(std::move(store), std::move(options));
}

}  // namespace pillar::audit
