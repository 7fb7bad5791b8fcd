#include "limits/limiter_config.h"

#include "common/status_macros.h"
#include "common/toml_parse.h"

namespace pillar::limits {

[[nodiscard]] absl::StatusOr<LimiterConfig> ReadLimiterSection(const toml::table& root,
                                                               std::string_view source,
                                                               const std::string& base) {
  using C = LimiterConfig;
  C config;
  TomlSection s(root["limiter"].as_table(), "limiter", source);
  PILLAR_RETURN_IF_ERROR(
      s.ReadEnum("backend", config.backend,
                 {{"embedded", C::Backend::kEmbedded}, {"redis", C::Backend::kRedis}}));
  PILLAR_RETURN_IF_ERROR(s.ReadString("redis_host", config.redis_host));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("redis_port", config.redis_port, 1, 65535));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("redis_password_file", config.redis_password_file, base));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("redis_timeout_ms", config.redis_timeout, 1, 60'000));
  PILLAR_RETURN_IF_ERROR(s.ReadString("redis_key_prefix", config.redis_key_prefix));
  PILLAR_RETURN_IF_ERROR(
      s.ReadEnum("on_redis_failure", config.on_redis_failure,
                 {{"closed", C::OnRedisFailure::kClosed}, {"open", C::OnRedisFailure::kOpen}}));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("instances", config.instances, 1, 10'000));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("lease_ttl_ms", config.lease_ttl, 1000, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("quota_flush_ms", config.quota_flush, 10, 3'600'000));
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return config;
}

}  // namespace pillar::limits
