// The replies to the Redis limiter's commands: an admission's verdict read, and the wrappers
// that give each command what it needs when its answer does not come or Redis refuses it (a
// script lost, slots a lost admission may hold, a release Redis could not take yet). Internal to
// limits/: RedisLimiter and its renewal use them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "limits/limiter.h"
#include "limits/redis_link.h"
#include "limits/slot_releases.h"
#include "monitor/metrics.h"

struct redisReply;

namespace pillar::limits {

// One admission's verdict from the admit script's reply: a refusal from Redis or a reply of
// another shape is Unavailable, and so are numbers the script cannot give (a Retry-After of
// centuries, a negative remaining: they go to the client as headers; review helper-54).
[[nodiscard]] absl::StatusOr<Verdict> ParseVerdict(const redisReply* reply);

// Wraps the reply of an EVALSHA: a NOSCRIPT answer (Redis lost its scripts: SCRIPT FLUSH, a
// failover to a replica without them) loads `script` again and sends `command` once more, on the
// same connection and so in order after the load.
RedisLink::Reply LoadingScriptIfLost(const char* script, std::string command,
                                     RedisLink::Reply reply);

// A reply nobody waits for: Redis's refusal is counted as an error, and so is a command lost to
// an outage when `count_outage` (a settlement).
RedisLink::Reply CountingErrors(monitor::Counter* errors, bool count_outage);

// Wraps an admission's reply: when the admission failed after its command was written, Redis may
// still run it (a stall past the timeout) and take its concurrency slots, which no release would
// then give back until the lease expires (review helper-54); their ZREMs go first on the next
// connection.
RedisLink::Reply ReleasingIfLost(SlotReleases slots, RedisLink::Reply reply);

// A release's reply: a release that could not be sent (the link is down), or whose answer never
// came, goes first thing on the next connection (review helper-99: two requests that ended
// during a short Redis stall left their slots taken until lease_ttl_ms, and the tenant was
// refused with nothing in flight). One that Redis refused (BUSY while a script runs too long,
// LOADING after a restart: the link stays up, so no reconnect would come; review helper-101) is
// sent again after a pause that doubles from 50 ms to 1 s, until `give_up`, when its lease
// would have expired anyway; its error is counted once. A ZREM sent twice removes nothing more.
RedisLink::Reply RetriedOnReconnect(std::string release, monitor::Counter* errors,
                                    std::chrono::steady_clock::time_point give_up,
                                    int refusals = 0);

// When a release made now stops being worth retrying: its lease has expired by then.
std::chrono::steady_clock::time_point ReleaseGiveUp(int64_t lease_ttl_us);

}  // namespace pillar::limits
