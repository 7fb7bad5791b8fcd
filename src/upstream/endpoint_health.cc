#include "upstream/endpoint_health.h"

#include <algorithm>

namespace pillar::upstream {

std::string_view EndpointStateName(EndpointState state) {
  switch (state) {
    case EndpointState::kHealthy:
      return "healthy";
    case EndpointState::kEjected:
      return "ejected";
    case EndpointState::kHalfOpen:
      return "half_open";
    case EndpointState::kUnhealthy:
      return "unhealthy";
  }
  return "healthy";
}

EndpointState EndpointHealth::state(TimePoint now) const {
  if (!ejected_) return failing_checks_ ? EndpointState::kUnhealthy : EndpointState::kHealthy;
  return now < ejected_until_ ? EndpointState::kEjected : EndpointState::kHalfOpen;
}

bool EndpointHealth::Available(TimePoint now) const {
  if (now < throttled_until_) return false;
  switch (state(now)) {
    case EndpointState::kHealthy:
      return true;
    case EndpointState::kEjected:
    case EndpointState::kUnhealthy:
      return false;
    case EndpointState::kHalfOpen:
      return !probing_;
  }
  return false;
}

void EndpointHealth::Record(Outcome outcome, TimePoint now, bool probe,
                            std::chrono::seconds retry_after) {
  wants_ejection_ = false;
  if (ejected_ && !probe) return;  // sent before the ejection: the probe decides
  switch (outcome) {
    case Outcome::kInconclusive:
      probing_ = false;
      return;
    case Outcome::kThrottled:
      // Busy, not broken: the endpoint is left alone until it said, and its health is unchanged.
      throttled_until_ = std::max(throttled_until_, now + retry_after);
      probing_ = false;
      return;
    case Outcome::kSuccess:
      failures_in_a_row_ = 0;
      if (ejected_) {  // the half-open probe answered: back in
        ejected_ = false;
        probing_ = false;
        last_ejection_end_ = now;
      } else if (times_ejected_ > 0 &&
                 now - last_ejection_end_ >= options_.base_ejection * times_ejected_) {
        times_ejected_ = 0;  // quiet for as long as its last ejection: a fresh start
      }
      return;
    case Outcome::kFailure:
      ++failures_in_a_row_;
      if (ejected_) {  // the half-open probe failed: out again, for longer
        Eject(now);
        return;
      }
      wants_ejection_ = failures_in_a_row_ >= options_.consecutive_failures;
      return;
  }
}

void EndpointHealth::Eject(TimePoint now) {
  ++times_ejected_;
  ++ejections_;
  const auto length = std::min<std::chrono::milliseconds>(options_.base_ejection * times_ejected_,
                                                          options_.max_ejection);
  ejected_ = true;
  probing_ = false;
  wants_ejection_ = false;
  failures_in_a_row_ = 0;
  ejected_until_ = now + length;
}

bool EndpointHealth::RecordCheck(bool passed) {
  if (passed == !failing_checks_) {  // as it stands: the count toward a change starts over
    checks_in_a_row_ = 0;
    return false;
  }
  const int threshold = passed ? options_.healthy_threshold : options_.unhealthy_threshold;
  if (++checks_in_a_row_ < threshold) return false;
  failing_checks_ = !passed;
  checks_in_a_row_ = 0;
  return true;
}

EndpointHealth::TimePoint EndpointHealth::AvailableAt(TimePoint now) const {
  TimePoint at = std::max(now, throttled_until_);
  if (ejected_ && now < ejected_until_) at = std::max(at, ejected_until_);
  return at;
}

}  // namespace pillar::upstream
