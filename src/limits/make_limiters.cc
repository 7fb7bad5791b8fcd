// MakeLimiters (limiter_config.h), apart from the parsing so that the configuration fuzzer
// links no limiter.
#include "common/crypto.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "limits/limiter_config.h"
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
