#include "upstream/upstream_metrics.h"

#include <memory>
#include <utility>
#include <vector>

namespace pillar::upstream {

UpstreamMetrics UpstreamMetrics::Register(monitor::MetricsRegistry& registry) {
  UpstreamMetrics m;
  const std::vector<std::string> labels = {"model", "version", "endpoint"};
  m.attempts = &registry.AddCounter(
      "pillar_upstream_attempts_total",
      "Attempts sent to an upstream endpoint, by outcome: ok, failed (connection, timeout, 5xx, "
      "unusable reply) or throttled (429, 503).",
      {"model", "version", "endpoint", "outcome"});
  m.latency = &registry.AddHistogram(
      "pillar_upstream_attempt_duration_seconds",
      "Time from sending an attempt to its reply, for replies that answer (a stream's: to "
      "[DONE], less what its events waited for the client).",
      labels, monitor::LatencyBuckets());
  m.outstanding = &registry.AddGauge("pillar_upstream_outstanding",
                                     "Attempts in flight to an upstream endpoint.", labels);
  m.state = &registry.AddGauge(
      "pillar_upstream_state",
      "An upstream endpoint's health: 0 healthy, 1 ejected, 2 half-open, 3 failing its "
      "active checks.",
      labels);
  m.ejections = &registry.AddCounter("pillar_upstream_ejections_total",
                                     "Times an upstream endpoint was ejected.", labels);
  m.retries = &registry.AddCounter("pillar_upstream_retries_total",
                                   "Attempts after a request's first, to another endpoint.",
                                   {"model", "version"});
  m.budget_exhausted = &registry.AddCounter(
      "pillar_upstream_retry_budget_exhausted_total",
      "Retries refused because too many requests were retrying at once.", {"model", "version"});
  m.breaker = &registry.AddGauge(
      "pillar_upstream_breaker_state",
      "An upstream endpoint's circuit breaker: 0 closed, 1 open, 2 half-open.", labels);
  m.trips = &registry.AddCounter("pillar_upstream_breaker_trips_total",
                                 "Times an upstream endpoint's circuit breaker opened.", labels);
  m.backend_breaker =
      &registry.AddGauge("pillar_backend_breaker_state",
                         "A remote model version's circuit breaker: 0 closed, 1 open, 2 half-open.",
                         {"model", "version"});
  m.backend_trips = &registry.AddCounter("pillar_backend_breaker_trips_total",
                                         "Times a remote model version's circuit breaker opened.",
                                         {"model", "version"});
  m.breaker_refused = &registry.AddCounter(
      "pillar_backend_breaker_refused_total",
      "Requests answered at once because the version's circuit breaker was open.",
      {"model", "version"});
  m.hedges = &registry.AddCounter(
      "pillar_upstream_hedges_total",
      "Hedged attempts: a second attempt to another endpoint while the first was slow.",
      {"model", "version"});
  m.hedge_wins =
      &registry.AddCounter("pillar_upstream_hedge_wins_total",
                           "Requests a hedged attempt answered first.", {"model", "version"});
  m.abandoned = &registry.AddCounter(
      "pillar_upstream_abandoned_total",
      "Calls ended before their answer because the client went away (its attempts cut off).",
      {"model", "version"});
  return m;
}

namespace {

// Holds the series it is given (monitor::Family::Hold) and hands out their metrics.
class Holder {
 public:
  template <typename Metric>
  Metric* operator()(std::shared_ptr<Metric> handle) {
    Metric* metric = handle.get();
    held_.push_back(std::move(handle));
    return metric;
  }
  std::shared_ptr<const void> Done() && {
    return std::make_shared<const std::vector<std::shared_ptr<const void>>>(std::move(held_));
  }

 private:
  std::vector<std::shared_ptr<const void>> held_;
};

}  // namespace

EndpointMetrics UpstreamMetrics::For(std::string_view model, std::string_view version,
                                     std::string_view endpoint) const {
  EndpointMetrics e;
  if (attempts == nullptr) return e;
  Holder hold;
  e.attempts_ok = hold(attempts->Hold({model, version, endpoint, "ok"}));
  e.attempts_failed = hold(attempts->Hold({model, version, endpoint, "failed"}));
  e.attempts_throttled = hold(attempts->Hold({model, version, endpoint, "throttled"}));
  e.latency = hold(latency->Hold({model, version, endpoint}));
  e.outstanding = hold(outstanding->Hold({model, version, endpoint}));
  e.state = hold(state->Hold({model, version, endpoint}));
  e.ejections = hold(ejections->Hold({model, version, endpoint}));
  e.breaker = hold(breaker->Hold({model, version, endpoint}));
  e.trips = hold(trips->Hold({model, version, endpoint}));
  e.series = std::move(hold).Done();
  return e;
}

RetryMetrics UpstreamMetrics::ForRetries(std::string_view model, std::string_view version) const {
  RetryMetrics r;
  if (retries == nullptr) return r;
  Holder hold;
  r.retries = hold(retries->Hold({model, version}));
  r.budget_exhausted = hold(budget_exhausted->Hold({model, version}));
  r.breaker = hold(backend_breaker->Hold({model, version}));
  r.trips = hold(backend_trips->Hold({model, version}));
  r.refused = hold(breaker_refused->Hold({model, version}));
  r.hedges = hold(hedges->Hold({model, version}));
  r.hedge_wins = hold(hedge_wins->Hold({model, version}));
  r.abandoned = hold(abandoned->Hold({model, version}));
  r.series = std::move(hold).Done();
  return r;
}

namespace {

std::string VersionKey(std::string_view model, std::string_view version) {
  std::string key(model);
  key.push_back('\x1f');  // cannot appear in a model name
  key.append(version);
  return key;
}

}  // namespace

uint64_t GaugeOwners::Claim(std::string_view model, std::string_view version) {
  absl::MutexLock lock(&mu_);
  const uint64_t claim = ++next_;
  current_[VersionKey(model, version)] = claim;
  return claim;
}

bool GaugeOwners::Owns(std::string_view model, std::string_view version, uint64_t claim) const {
  absl::MutexLock lock(&mu_);
  auto it = current_.find(VersionKey(model, version));
  return it != current_.end() && it->second == claim;
}

}  // namespace pillar::upstream
