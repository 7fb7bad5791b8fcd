// What a remote model's upstream endpoints are doing, as metrics (docs/operations.md lists them):
// one set of families per server, the label values naming the model, its version and the
// endpoint by its place (its URL in one spelling, models::EndpointPlace; never its credentials).
//
//   UpstreamMetrics metrics = UpstreamMetrics::Register(registry);
//   EndpointMetrics e = metrics.For("digits", "3", "http://10.0.0.5:8000");
//   e.attempts_ok->Increment();
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "monitor/metrics.h"

namespace pillar::upstream {

// The metrics of one endpoint of one model version: pointers into the registry's families,
// valid while `series` is held (monitor::Family::Hold); the series leave /metrics once nothing
// holds them (the endpoint withdrawn, the version unloaded, and the attempts sent to it ended).
struct EndpointMetrics {
  monitor::Counter* attempts_ok = nullptr;         // answered with a usable reply
  monitor::Counter* attempts_failed = nullptr;     // connection, timeout, 5xx, unusable reply
  monitor::Counter* attempts_throttled = nullptr;  // 429 or 503
  monitor::Histogram* latency = nullptr;           // seconds, per attempt that got a reply
  monitor::Gauge* outstanding = nullptr;           // attempts in flight now
  monitor::Gauge* state = nullptr;  // 0 healthy, 1 ejected, 2 half-open, 3 failing checks
  monitor::Counter* ejections = nullptr;
  monitor::Gauge* breaker = nullptr;   // 0 closed, 1 open, 2 half-open
  monitor::Counter* trips = nullptr;   // times its circuit breaker opened
  std::shared_ptr<const void> series;  // holds the series above
};

// A remote model version's retry metrics; held like EndpointMetrics'.
struct RetryMetrics {
  monitor::Counter* retries = nullptr;           // attempts after the first
  monitor::Counter* budget_exhausted = nullptr;  // retries refused by the budget
  monitor::Gauge* breaker = nullptr;             // the backend's breaker: 0 closed, 1 open, 2 half
  monitor::Counter* trips = nullptr;             // times the backend's breaker opened
  monitor::Counter* refused = nullptr;           // requests answered at once by an open breaker
  monitor::Counter* hedges = nullptr;            // hedged attempts sent
  monitor::Counter* hedge_wins = nullptr;        // requests a hedge answered first
  monitor::Counter* abandoned = nullptr;         // calls ended because their client went away
  std::shared_ptr<const void> series;            // holds the series above
};

// Which runner of a model version sets its state gauges each second
// (RemoteRunner::State::RefreshGauges): the one made last for it. A runner a reload replaced lives
// on while calls it holds run, and its view of the endpoints is not the one in service (review
// helper-114: its ticks flipped the new runner's gauges back).
class GaugeOwners {
 public:
  // Makes the caller the version's owner; the claim to show Owns.
  uint64_t Claim(std::string_view model, std::string_view version);
  bool Owns(std::string_view model, std::string_view version, uint64_t claim) const;

 private:
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t, std::less<>> current_ ABSL_GUARDED_BY(mu_);
};

struct UpstreamMetrics {
  monitor::Family<monitor::Counter>* attempts = nullptr;
  monitor::Family<monitor::Histogram>* latency = nullptr;
  monitor::Family<monitor::Gauge>* outstanding = nullptr;
  monitor::Family<monitor::Gauge>* state = nullptr;
  monitor::Family<monitor::Counter>* ejections = nullptr;
  monitor::Family<monitor::Counter>* retries = nullptr;
  monitor::Family<monitor::Counter>* budget_exhausted = nullptr;
  monitor::Family<monitor::Gauge>* breaker = nullptr;  // per endpoint
  monitor::Family<monitor::Counter>* trips = nullptr;  // per endpoint
  monitor::Family<monitor::Gauge>* backend_breaker = nullptr;
  monitor::Family<monitor::Counter>* backend_trips = nullptr;
  monitor::Family<monitor::Counter>* breaker_refused = nullptr;
  monitor::Family<monitor::Counter>* hedges = nullptr;
  monitor::Family<monitor::Counter>* hedge_wins = nullptr;
  monitor::Family<monitor::Counter>* abandoned = nullptr;
  // Shared by every copy (each runner has one).
  std::shared_ptr<GaugeOwners> owners = std::make_shared<GaugeOwners>();

  static UpstreamMetrics Register(monitor::MetricsRegistry& registry);
  EndpointMetrics For(std::string_view model, std::string_view version,
                      std::string_view endpoint) const;
  RetryMetrics ForRetries(std::string_view model, std::string_view version) const;
};

}  // namespace pillar::upstream
