// The limiter for many instances: counters live in one Redis, and each request's charges are
// checked and taken by one Lua script, atomically on the server, with the server's clock. N
// pillar processes sharing a Redis therefore let through exactly the configured numbers
// (tests/integration/limits_test.cc runs three against a real redis-server).
//
//   RedisLimiter limiter({.host = "127.0.0.1", .port = 6379});
//   limiter.Admit(charges, request_id, [](absl::StatusOr<Verdict> v) { ... });
// One connection, driven by one thread that pipelines whatever requests are waiting into a
// single write, so throughput does not cost a round trip per request. When Redis cannot be
// reached, Admit() answers Unavailable at once (the admit stage then fails closed or falls
// back, as configured), the thread retries the connection with backoff, and the gauge
// pillar_limiter_backend_up and one log line per episode say so.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "limits/limiter.h"
#include "monitor/metrics.h"

struct redisContext;

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
  size_t max_pending = 65536;                    // beyond it, Admit() answers Unavailable
  monitor::MetricsRegistry* metrics = nullptr;
  // Names the quota period a charge falls in (sent to Redis with it) and times reconnections.
  const Clock* clock = &SystemClock();
};

class RedisLimiter final : public Limiter {
 public:
  explicit RedisLimiter(RedisLimiterOptions options);
  ~RedisLimiter() override;

  bool synchronous() const override { return false; }
  // Blocks until Redis answers (CLI, tests); the request path uses Admit().
  [[nodiscard]] absl::StatusOr<Verdict> AdmitNow(std::span<const Charge> charges,
                                                 std::string_view lease) override;
  void Admit(std::span<const Charge> charges, std::string_view lease, Done done) override;
  void Release(std::span<const Charge> charges, std::string_view lease) override;
  // Sent with the next batch; lost (and counted as an error) while Redis is down.
  void Settle(std::span<const Charge> charges, int64_t admitted_unix_s) override;

  bool up() const { return up_.load(); }

 private:
  struct Command {
    std::vector<std::string> args;
    Done done;  // empty for fire-and-forget commands (releases)
  };

  void Loop();
  bool Connect() ABSL_LOCKS_EXCLUDED(mu_);
  void Disconnect(std::string_view why);
  // Sends `batch` pipelined and hands each reply to its command; commands answered NOSCRIPT
  // are retried once after loading the script again.
  void Run(std::vector<Command>& batch, bool retry_missing_script);
  bool LoadScript();
  void Enqueue(Command command);
  std::string Key(char kind, const Charge& charge, int64_t now_s) const;

  // Declared before options_, which is then built from the options without the password.
  SecretString password_;
  const RedisLimiterOptions options_;
  redisContext* context_ = nullptr;  // owned by the loop thread
  const std::string script_sha_;     // SHA-1 of the script, as EVALSHA names it
  // Touched by the loop thread only.
  std::atomic<bool> up_{false};
  std::atomic<int64_t> retry_at_ns_{0};  // while down, Admit() fails fast until then
  std::string last_error_;
  monitor::Gauge* up_gauge_ = nullptr;
  monitor::Counter* errors_ = nullptr;

  absl::Mutex mu_;
  std::vector<Command> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pillar::limits
