#include "limits/limiter_config.h"

#include "common/crypto.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/toml_parse.h"
#include "limits/local_limiter.h"
#include "limits/redis_limiter.h"

namespace pillar::limits {
namespace {

// The password file's content without its line end; the caller wipes it after use.
[[nodiscard]] absl::StatusOr<std::string> ReadPassword(const std::string& path) {
  absl::StatusOr<std::string> password = ReadSecretFile(path, 4096);
  while (password.ok() && !password->empty() &&
         (password->back() == '\n' || password->back() == '\r')) {
    password->pop_back();
  }
  return password;
}

}  // namespace

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

[[nodiscard]] absl::StatusOr<Limiters> MakeLimiters(const LimiterConfig& config,
                                                    state::StateStore& store,
                                                    monitor::MetricsRegistry& metrics) {
  Limiters limiters;
  if (config.backend == LimiterConfig::Backend::kEmbedded) {
    auto local = std::make_unique<LocalLimiter>(
        LocalLimiterOptions{.store = &store, .flush_interval = config.quota_flush});
    PILLAR_RETURN_IF_ERROR(local->LoadQuotas());
    limiters.primary = std::move(local);
    return limiters;
  }
  RedisLimiterOptions options;
  options.host = config.redis_host;
  options.port = config.redis_port;
  options.timeout = config.redis_timeout;
  options.key_prefix = config.redis_key_prefix;
  options.lease_ttl = config.lease_ttl;
  options.metrics = &metrics;
  if (!config.redis_password_file.empty()) {
    absl::StatusOr<std::string> password = ReadPassword(config.redis_password_file);
    if (!password.ok()) return password.status();
    options.password = std::move(*password);
    WipeString(*password);  // what the move leaves of a short password
  }
  limiters.primary = std::make_unique<RedisLimiter>(std::move(options));
  WipeString(options.password);  // likewise: the limiter keeps the one copy it reconnects with
  if (config.on_redis_failure == LimiterConfig::OnRedisFailure::kOpen) {
    limiters.fallback =
        std::make_unique<LocalLimiter>(LocalLimiterOptions{.divisor = config.instances});
  }
  return limiters;
}

}  // namespace pillar::limits
