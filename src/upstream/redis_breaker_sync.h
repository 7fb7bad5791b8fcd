// BreakerSync through Redis (the same server as the limits, [limiter] backend = "redis"): a trip
// is a key `<prefix>:breaker:<name>` holding its end (Unix milliseconds) that expires with it,
// and a message on the channel `<prefix>:breakers`. Subscribers hear the message within
// milliseconds, and read the keys of their names whenever they (re)subscribe, so an instance
// that starts, or reconnects, during a trip sees it too. One thread with two connections (one
// subscribed, one for commands); while Redis cannot be reached, trips stay local and the
// thread reconnects with backoff (one log line per episode).
//
//   RedisBreakerSync sync({.host = "127.0.0.1", .port = 6379});
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/crypto.h"
#include "upstream/breaker_sync.h"

struct redisContext;

namespace pillar::upstream {

struct RedisBreakerSyncOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  SecretString password;  // AUTH, when not empty
  int64_t timeout_ms = 250;
  std::string key_prefix = "pillar";
};

class RedisBreakerSync final : public BreakerSync {
 public:
  explicit RedisBreakerSync(RedisBreakerSyncOptions options);
  ~RedisBreakerSync() override;
  RedisBreakerSync(const RedisBreakerSync&) = delete;
  RedisBreakerSync& operator=(const RedisBreakerSync&) = delete;

  void Publish(const std::string& name, int64_t until_unix_ms) override;
  uint64_t Subscribe(std::string name, OnTrip on_trip) override;
  void Unsubscribe(uint64_t token) override;

 private:
  struct Subscription {
    std::string name;
    OnTrip on_trip;
  };

  void Run();
  bool Connect();
  void Disconnect(std::string_view why);
  // Reads the trip keys of every subscribed name and hands on those still running.
  void CatchUp();
  void SendPublishes();
  void ReadMessages();
  void Dispatch(std::string_view name, int64_t until_unix_ms);
  void Wake();

  const RedisBreakerSyncOptions options_;
  const std::string instance_;  // this process's id, so that it ignores its own messages
  const std::string channel_;

  absl::Mutex mu_;
  std::map<uint64_t, Subscription> subscriptions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::pair<std::string, int64_t>> publishes_ ABSL_GUARDED_BY(mu_);
  bool resubscribed_ ABSL_GUARDED_BY(mu_) = false;  // a new name to catch up on
  // Held while callbacks run, so that Unsubscribe() waits for a running one.
  absl::Mutex dispatch_mu_;

  redisContext* subscriber_ = nullptr;  // the bus thread's
  redisContext* commands_ = nullptr;    // the bus thread's
  bool up_ = true;                      // for one log line per outage
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pillar::upstream
