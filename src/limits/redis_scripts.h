// The Lua the Redis limiter runs in Redis (redis_limiter.h), and the contract of each script:
// what KEYS and ARGV hold and what it returns. Each runs atomically on the server with the
// server's clock (TIME), which is what makes N pillar processes sharing a Redis exact.
#pragma once

namespace pillar::limits {

// Decides a batch of admissions (RedisLimiter's, one turn of one loop): see redis_scripts.cc.
extern const char* const kAdmitScript;
// Applies a batch of settlements (Limiter::Settle): see redis_scripts.cc.
extern const char* const kSettleScript;
// Renews the concurrency leases held longer than a third of their time to live (LeaseKeeper).
extern const char* const kRenewScript;

}  // namespace pillar::limits
