// A circuit breaker (closed, open, half-open) with a rule in Azure API Management's vocabulary
// (models::BreakerRule): failures counted over a sliding interval, by count or by share, trip it
// open for a duration (or for an upstream's Retry-After); an open breaker refuses at once; when
// the trip ends it is half-open and lets a bounded number of probes through, all of which must
// succeed to close it, while any failure opens it again. One per endpoint and one per backend,
// used on its runner's thread only; time is passed in, so tests drive it without waiting.
//
//   CircuitBreaker breaker(rule);
//   CircuitBreaker::Admission admission = breaker.Admit(now);
//   if (admission == CircuitBreaker::Admission::kRefused) return Refuse(breaker.open_until());
//   ... send ...;
//   breaker.Record(CircuitBreaker::Verdict::kFailure, now,
//                  admission == CircuitBreaker::Admission::kProbe);
//
// Differences from a plain counter worth knowing:
// - the interval slides in tenths of it: an old burst leaves the count a tenth at a time;
// - outcomes of requests admitted before a trip do not count while it is open or half-open
//   (only the probes decide), so a burst that was already in flight cannot prolong a trip;
// - a trip can come from elsewhere (Trip(): another instance saw it, through Redis).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "models/remote_config.h"

namespace pillar::upstream {

enum class BreakerState { kClosed = 0, kOpen = 1, kHalfOpen = 2 };
std::string_view BreakerStateName(BreakerState state);

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  // What one request said. kIgnored: nothing (cut off by its caller's own deadline, or an
  // outcome the rule does not look at).
  enum class Verdict { kSuccess, kFailure, kIgnored };
  enum class Admission { kRefused, kAdmitted, kProbe };
  struct Transition {
    BreakerState from;
    BreakerState to;
  };

  explicit CircuitBreaker(const models::BreakerRule& rule) : rule_(rule) {}

  bool enabled() const { return rule_.enabled(); }
  const models::BreakerRule& rule() const { return rule_; }
  BreakerState state(TimePoint now) const;
  // Whether a request may pass now. While half-open, each kProbe takes one of the probe places,
  // which the request's Record(..., probe = true) gives back.
  Admission Admit(TimePoint now);
  // Whether Admit() would let a request through now, without taking a probe place.
  bool WouldAdmit(TimePoint now) const;
  // `probe`: the request was let through by Allow() while half-open. Returns the change of
  // state it caused, if any (for logs, metrics and the audit log).
  std::optional<Transition> Record(Verdict verdict, TimePoint now, bool probe,
                                   std::chrono::milliseconds retry_after = {});
  // Opens until `until` (a trip seen by another instance); a breaker already open longer is
  // left alone. Returns the transition, if any.
  std::optional<Transition> Trip(TimePoint until, TimePoint now);
  // The end of the current trip (meaningful while open).
  TimePoint open_until() const { return open_until_; }
  int64_t trips() const { return trips_; }
  // Failures and requests counted in the current interval.
  int64_t failures(TimePoint now) const;
  int64_t requests(TimePoint now) const;

 private:
  // The interval in tenths: each bucket counts the requests and failures of one tenth.
  static constexpr int kBuckets = 10;
  struct Bucket {
    int64_t slot = -1;  // which tenth since the clock's epoch this bucket holds
    int64_t requests = 0;
    int64_t failures = 0;
  };

  int64_t SlotOf(TimePoint now) const;
  Bucket& Current(TimePoint now);
  // Counts a failure in `bucket` and says whether the rule now trips.
  bool ShouldTripAfterFailure(Bucket& bucket, TimePoint now);
  void Open(TimePoint now, std::chrono::milliseconds length);

  models::BreakerRule rule_;
  std::array<Bucket, kBuckets> buckets_{};
  bool open_ = false;       // open or half-open (the trip has been taken and not yet closed)
  TimePoint open_until_{};  // open before it, half-open after it
  int probes_out_ = 0;      // half-open probes in flight
  int probes_passed_ = 0;   // half-open probes that succeeded
  int64_t trips_ = 0;
};

}  // namespace pillar::upstream
