// RedisLimiter: the leases of the requests in flight renewed while they are held (the rest of
// the limiter is in redis_limiter.cc). A concurrency slot's lease lives lease_ttl_ms in Redis,
// so that a crashed instance's slots come back on their own; a request that holds its slot
// longer (a long stream) has its lease's expiry pushed on every third of that TTL (review
// helper-101: a stream longer than the TTL lost its slot, and the limit admitted one more).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "limits/lease_keeper.h"
#include "limits/redis_limiter.h"
#include "limits/redis_replies.h"
#include "limits/redis_scripts.h"
#include "limits/resp_command.h"

namespace pillar::limits {

void RedisLimiter::RenewLater() {
  if (stopping_) return;
  renew_timer_.expires_after(std::chrono::microseconds(
      std::max<int64_t>(1000, absl::ToInt64Microseconds(options_.lease_ttl) / 3)));
  renew_timer_.async_wait([this](const boost::system::error_code& error) {
    if (error || stopping_) return;
    Renew();
    RenewLater();
  });
}

// The leases held a third of their TTL, renewed in calls of at most kMaxBatch leases; a renewal
// lost to an outage is tried again at the next tick (the lease is due again by then).
void RedisLimiter::Renew() {
  const int64_t ttl_us = absl::ToInt64Microseconds(options_.lease_ttl);
  std::vector<std::pair<std::string, std::vector<std::string>>> due =
      leases_->Due(std::chrono::steady_clock::now(), std::chrono::microseconds(ttl_us / 3));
  RespCommand keys;
  RespCommand args;
  size_t leases = 0;
  auto send = [&] {
    if (keys.count() == 0) return;
    std::string command = RespCommand()
                              .Add("EVALSHA")
                              .Add(group_->script_shas()[2])
                              .Add(keys.count())
                              .AddEncoded(keys.encoded(), keys.count())
                              .Add(ttl_us)
                              .AddEncoded(args.encoded(), args.count())
                              .Take();
    std::string resend = command;
    own_link_->Send(command, LoadingScriptIfLost(kRenewScript, std::move(resend),
                                                 CountingErrors(errors_, false)));
    keys = RespCommand();
    args = RespCommand();
    leases = 0;
  };
  for (auto& [key, held] : due) {
    for (size_t from = 0; from < held.size(); from += kMaxBatch) {
      const size_t n = std::min(kMaxBatch, held.size() - from);
      keys.Add(key);
      args.Add(int64_t(n));
      for (size_t i = from; i < from + n; ++i) args.Add(held[i]);
      leases += n;
      if (leases >= kMaxBatch) send();
    }
  }
  send();
}

}  // namespace pillar::limits
