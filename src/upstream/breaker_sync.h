// Circuit-breaker trips shared between pillar instances (beyond Azure API Management, whose
// gateway instances do not share breaker state): when one instance's breaker opens, it publishes
// the trip, and every other instance's breaker of the same name opens until the same time.
// Closing is not shared: each instance probes for itself once the trip ends.
//
//   sync.Publish("digits/3", until_unix_ms);
//   uint64_t token = sync.Subscribe("digits/3", [](int64_t until_unix_ms) { ... });
//   sync.Unsubscribe(token);
// Names: "<model>/<version>" for a version's breaker, "<model>/<version> <endpoint URL>" for an
// endpoint's. Implementations are thread-safe; `on_trip` runs on their thread and must only
// hand the trip on (RemoteRunner posts it to its own thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace pillar::upstream {

class BreakerSync {
 public:
  using OnTrip = std::function<void(int64_t until_unix_ms)>;

  virtual ~BreakerSync() = default;
  // Tells the other instances that breaker `name` is open until `until_unix_ms`.
  virtual void Publish(const std::string& name, int64_t until_unix_ms) = 0;
  // `on_trip` hears of trips of `name` by other instances (never of this one's own), including
  // one still running when the subscription starts or the connection comes back.
  virtual uint64_t Subscribe(std::string name, OnTrip on_trip) = 0;
  // After it returns, `on_trip` of `token` is not running and is never called again.
  virtual void Unsubscribe(uint64_t token) = 0;
};

}  // namespace pillar::upstream
