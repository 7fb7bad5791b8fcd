// The [limiter] section of pillar.toml: where limits are counted (in this process, with
// quotas in the state store, or in Redis, exact across instances) and what happens while Redis
// cannot be reached. Each key is described in docs/configuration.md.
//
//   PILLAR_ASSIGN_OR_RETURN(limits::LimiterConfig config,
//                           limits::ReadLimiterSection(root, "pillar.toml", base));
//   PILLAR_ASSIGN_OR_RETURN(limits::Limiters limiters,
//                           limits::MakeLimiters(config, store, metrics));
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "limits/limiter.h"
#include "monitor/metrics.h"
#include "state/state_store.h"

namespace pillar::limits {

struct LimiterConfig {
  enum class Backend { kEmbedded, kRedis };
  // While Redis cannot be reached: refuse what is limited (closed), or count in this process
  // with each limit divided by `instances` (open).
  enum class OnRedisFailure { kClosed, kOpen };

  Backend backend = Backend::kEmbedded;
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::string redis_password_file;
  absl::Duration redis_timeout = absl::Milliseconds(250);
  std::string redis_key_prefix = "pillar";
  OnRedisFailure on_redis_failure = OnRedisFailure::kClosed;
  int64_t instances = 1;
  absl::Duration lease_ttl = absl::Seconds(60);
  absl::Duration quota_flush = absl::Seconds(1);
};

// Relative paths are taken from `base`.
[[nodiscard]] absl::StatusOr<LimiterConfig> ReadLimiterSection(const toml::table& root,
                                                               std::string_view source,
                                                               const std::string& base);

struct Limiters {
  std::unique_ptr<Limiter> primary;
  std::unique_ptr<Limiter> fallback;  // null: fail closed
};

// The embedded limiter (its quotas loaded from `store`), or the Redis one with its fallback.
[[nodiscard]] absl::StatusOr<Limiters> MakeLimiters(const LimiterConfig& config,
                                                    state::StateStore& store,
                                                    monitor::MetricsRegistry& metrics);

}  // namespace pillar::limits
