#include "audit/audit_config.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::audit {

[[nodiscard]] absl::StatusOr<AuditConfig> ReadAuditSection(const toml::table& root,
                                                           std::string_view source,
                                                           const std::string& base) {
  using C = AuditConfig;
  C config;
  TomlSection s(root["audit"].as_table(), "audit", source);
  PILLAR_RETURN_IF_ERROR(s.ReadEnum("backend", config.backend,
                                    {{"file", C::Backend::kFile},
                                     {"postgres", C::Backend::kPostgres},
                                     {"off", C::Backend::kOff}}));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("file", config.file, base));
  PILLAR_RETURN_IF_ERROR(s.ReadString("postgres", config.postgres));
  PILLAR_RETURN_IF_ERROR(s.ReadString("instance", config.instance));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("signing_key", config.signing_key, base));
  PILLAR_RETURN_IF_ERROR(s.ReadPaths("public_keys", config.public_keys, base));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("checkpoint_interval_ms", config.checkpoint_interval, 10, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadEnum(
      "fsync", config.fsync,
      {{"batch", C::Fsync::kBatch}, {"interval", C::Fsync::kInterval}, {"off", C::Fsync::kOff}}));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("fsync_interval_ms", config.fsync_interval, 1, 60'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("batch_delay_ms", config.batch_delay, 0, 1'000));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("queue_capacity", config.queue_capacity, 16, 16'777'216));
  PILLAR_RETURN_IF_ERROR(s.ReadEnum("on_full", config.on_full,
                                    {{"drop", C::OnFull::kDrop}, {"refuse", C::OnFull::kRefuse}}));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  if (config.backend == C::Backend::kPostgres && config.postgres.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [audit] backend \"postgres\" needs a postgres connection string"));
  }
  return config;
}

}  // namespace pillar::audit
