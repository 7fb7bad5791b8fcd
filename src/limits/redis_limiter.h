// The limiter for many instances: counters live in one Redis, and each request's charges are
// checked and taken by one Lua script, atomically on the server, with the server's clock. N
// pillar processes sharing a Redis therefore let through exactly the configured numbers
// (tests/integration/limits_test.cc runs three against a real redis-server).
//
//   RedisLimiter limiter({.host = "127.0.0.1", .port = 6379});
//   limiter.Admit(charges, request_id, [](absl::StatusOr<Verdict> v) { ... });
// Called on a server's event loop, a command goes out on that loop's own connection
// (RedisLink), pipelined with the other commands of the same turn of the loop, and its answer
// comes back on that loop: one round trip, no thread hand-off. Other threads (the CLI, tests,
// AdmitNow) use the limiter's own thread and connection. When Redis cannot be reached, a call
// is answered Unavailable at once (the admit stage then fails closed or falls back, as
// configured), the connections retry with backoff, and the gauge pillar_limiter_backend_up and
// one log line per episode say so.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "limits/lease_keeper.h"
#include "limits/limiter.h"
#include "limits/redis_link.h"
#include "limits/resp_command.h"
#include "limits/slot_releases.h"
#include "monitor/metrics.h"

namespace pillar::limits {

struct RedisLimiterOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  // AUTH, when set. The limiter takes it (every reconnection needs it), wipes what the move
  // leaves here, and wipes its copy when destroyed; the caller wipes its own (WipeString).
  std::string password;
  absl::Duration timeout = absl::Milliseconds(250);  // connect and each reply
  std::string key_prefix = "pillar";
  absl::Duration lease_ttl = absl::Seconds(60);  // a crashed holder's slot frees after it
  size_t max_pending = 65536;  // per connection; beyond it, Admit() answers Unavailable
  monitor::MetricsRegistry* metrics = nullptr;
  // Names the quota period a charge falls in (sent to Redis with it) and times reconnections.
  const Clock* clock = &SystemClock();
};

class RedisLimiter final : public Limiter {
  struct Batch;

 public:
  // One loop's connection and the admissions it gathers during a turn; used on that loop's
  // thread only (internal; public for the thread's cache in the .cc).
  struct LoopLink;

  explicit RedisLimiter(RedisLimiterOptions options);
  ~RedisLimiter() override;

  bool synchronous() const override { return false; }
  // Blocks until Redis answers, through the limiter's own thread (CLI, tests); the request path
  // uses Admit().
  [[nodiscard]] absl::StatusOr<Verdict> AdmitNow(std::span<const Charge> charges,
                                                 std::string_view lease) override;
  void Admit(std::span<const Charge> charges, std::string_view lease, Done done) override;
  void Release(std::span<const Charge> charges, std::string_view lease) override;
  // Lost (and counted as an error) while Redis is down.
  void Settle(std::span<const Charge> charges, int64_t admitted_unix_s) override;

  // The most admissions one call of the limit script decides.
  static constexpr size_t kMaxBatch = 256;

  bool up() const { return group_->up(); }
  // The concurrency leases held now (renewed while held; tests).
  size_t leases_held() const { return leases_->held(); }
  // Over every connection so far: commands sent and writes made (tests of pipelining).
  uint64_t commands() const;
  uint64_t writes() const;

 private:
  // Adds one request's admission to `batch`: its charges' keys and arguments (shared with an
  // admission of the same charges already there), its lease, and its ZREMs.
  void Gather(Batch& batch, std::span<const Charge> charges, std::string_view lease,
              Done done) const;
  // Sends what `on` gathered: the slots given back (one ZREM a key), then the admissions as one
  // command.
  static void Flush(LoopLink& on);
  // The settlement's EVALSHA (empty: nothing to settle).
  std::string SettleCommand(std::span<const Charge> charges, int64_t admitted_unix_s) const;
  // Adds the concurrency slots of `charges` held by `lease` to `slots`.
  void AddSlots(SlotReleases& slots, std::span<const Charge> charges, std::string_view lease) const;
  // Posts a Flush of `on` to `loop`, once a turn: it runs after what the turn had queued.
  static void FlushAfterThisTurn(LoopLink& on, boost::asio::io_context& loop);
  // Sends `command` on the calling loop's connection, or through the limiter's thread.
  void Dispatch(std::string command, RedisLink::Reply reply,
                RedisLink::Pending pending = RedisLink::Pending::kCapped);
  // This loop's connection, from the thread's cache or made now.
  LoopLink& LinkOn(boost::asio::io_context& loop);
  // A batch of one, through the limiter's own thread.
  void SendAlone(Batch batch);
  // One EVALSHA of the limit script deciding every admission of `batch`, on `link`.
  static void SendBatch(RedisLink& link, Batch batch, const RedisLinkGroup& group,
                        int64_t lease_ttl_us, monitor::Counter* errors);
  // The charges' keys (added to `keys`) and the script's arguments for them.
  RespCommand Spec(std::span<const Charge> charges, RespCommand& keys) const;
  std::string Key(char kind, const Charge& charge, int64_t now_s) const;
  // On the limiter's thread, every third of the lease TTL: renews the leases held that long.
  void RenewLater();
  void Renew();

  const RedisLimiterOptions options_;  // without the password, which the group keeps
  const uint64_t serial_;              // tells this limiter's links apart in a thread's cache
  monitor::Counter* errors_ = nullptr;
  const std::shared_ptr<RedisLinkGroup> group_;

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<LoopLink>> links_ ABSL_GUARDED_BY(mu_);  // one per loop

  // The limiter's own thread, for callers that run no event loop.
  boost::asio::io_context own_loop_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> own_work_;
  std::shared_ptr<RedisLink> own_link_;
  // The leases admissions took and releases have not given back; shared with the admissions'
  // callbacks, which may run after the limiter is gone (their link closing).
  const std::shared_ptr<LeaseKeeper> leases_ = std::make_shared<LeaseKeeper>();
  boost::asio::steady_timer renew_timer_{own_loop_};  // on the limiter's thread only
  bool stopping_ = false;                             // on the limiter's thread only
  std::thread own_thread_;
};

}  // namespace pillar::limits
