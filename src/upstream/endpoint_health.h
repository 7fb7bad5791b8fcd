// Whether an upstream endpoint may be sent a request now: passive outlier ejection, an upstream's
// Retry-After, and the half-open probe that lets an ejected endpoint back in. One per endpoint,
// used on its runner's thread only; time is passed in, so tests drive it without waiting.
//
//   EndpointHealth health(options);
//   if (health.Available(now)) { ... send ...; health.Record(outcome, now); }
//
// The rules, after Envoy's outlier detection (docs/formats/model_store.md says where pillar
// differs):
// - `consecutive_failures` failures in a row (a connect failure, a 5xx, a cut-off attempt, a
//   reply pillar cannot use; not a 429) eject the endpoint for base_ejection x the number of
//   times it has been ejected, capped at max_ejection;
// - when the ejection ends, the endpoint is half-open: it gets one request at a time; a success
//   closes it (and, after as long as its last ejection without another, forgets the count), a
//   failure ejects it again, for longer;
// - a 429 or 503 with Retry-After keeps every request away until then, without counting as a
//   failure of the endpoint's health;
// - while the endpoint is out, only the probe's outcome counts, and a probe that says nothing
//   (cut off by its caller's deadline) frees the slot for the next request to probe;
// - active checks (RecordCheck) take an endpoint out after unhealthy_threshold failed checks in
//   a row and back after healthy_threshold passed ones, whatever the traffic says meanwhile.
// How many endpoints of a set may be out at once (max_ejection_percent, panic) is the set's
// decision: see RemoteRunner.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace pillar::upstream {

struct HealthOptions {
  int consecutive_failures = 5;
  std::chrono::milliseconds base_ejection{30'000};
  std::chrono::milliseconds max_ejection{300'000};
  int healthy_threshold = 1;
  int unhealthy_threshold = 2;
};

// kUnhealthy: failing its active health checks.
enum class EndpointState { kHealthy = 0, kEjected = 1, kHalfOpen = 2, kUnhealthy = 3 };
std::string_view EndpointStateName(EndpointState state);

class EndpointHealth {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // What an attempt says of the endpoint. kSuccess: it answered sanely (any reply below 500
  // other than a 429: a 404 is the request's fault, not the endpoint's). kInconclusive: nothing
  // (the caller's own short deadline cut it off).
  enum class Outcome { kSuccess, kFailure, kThrottled, kInconclusive };

  explicit EndpointHealth(HealthOptions options) : options_(options) {}
  // New thresholds for what comes next (the backends changed); what is known stays.
  void SetOptions(HealthOptions options) { options_ = options; }

  EndpointState state(TimePoint now) const;
  // Whether a request may go to the endpoint now. For a half-open endpoint, true once: the
  // caller sends the probe, and Record() says how it went.
  bool Available(TimePoint now) const;
  // Takes the half-open probe slot (call when sending to a half-open endpoint).
  void StartProbe() { probing_ = true; }
  // `probe`: the attempt was the half-open probe. While the endpoint is out, only its probe's
  // outcome counts: attempts sent before the ejection neither lengthen nor end it.
  void Record(Outcome outcome, TimePoint now, bool probe, std::chrono::seconds retry_after = {});
  // Ejects at once (the set's panic rules allowed an ejection Record() asked for).
  void Eject(TimePoint now);
  // True when the last Record() reached the ejection threshold; the set decides.
  bool WantsEjection() const { return wants_ejection_; }
  // When the endpoint is next available (now, when it is).
  TimePoint AvailableAt(TimePoint now) const;
  int64_t ejections() const { return ejections_; }
  bool Throttled(TimePoint now) const { return now < throttled_until_; }
  // An active health check's result. Returns true when it changed whether the endpoint is in
  // service by the checks.
  bool RecordCheck(bool passed);
  bool failing_checks() const { return failing_checks_; }

 private:
  HealthOptions options_;
  int failures_in_a_row_ = 0;
  int64_t times_ejected_ = 0;  // for the ejection's length; decays after a quiet period
  int64_t ejections_ = 0;      // ever, for metrics
  TimePoint ejected_until_{};
  TimePoint throttled_until_{};
  TimePoint last_ejection_end_{};
  bool ejected_ = false;
  bool probing_ = false;
  bool wants_ejection_ = false;
  bool failing_checks_ = false;
  int checks_in_a_row_ = 0;  // passed ones while failing, failed ones while passing
};

}  // namespace pillar::upstream
