#include "upstream/circuit_breaker.h"

#include <algorithm>

namespace pillar::upstream {

std::string_view BreakerStateName(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

BreakerState CircuitBreaker::state(TimePoint now) const {
  if (!open_) return BreakerState::kClosed;
  return now < open_until_ ? BreakerState::kOpen : BreakerState::kHalfOpen;
}

bool CircuitBreaker::WouldAdmit(TimePoint now) const {
  switch (state(now)) {
    case BreakerState::kClosed:
      return true;
    case BreakerState::kOpen:
      return false;
    case BreakerState::kHalfOpen:
      return probes_out_ + probes_passed_ < rule_.half_open_probes;
  }
  return false;
}

CircuitBreaker::Admission CircuitBreaker::Admit(TimePoint now) {
  if (!WouldAdmit(now)) return Admission::kRefused;
  if (state(now) == BreakerState::kClosed) return Admission::kAdmitted;
  ++probes_out_;
  return Admission::kProbe;
}

std::optional<CircuitBreaker::Transition> CircuitBreaker::Record(
    Verdict verdict, TimePoint now, bool probe, std::chrono::milliseconds retry_after) {
  if (!enabled()) return std::nullopt;
  const BreakerState before = state(now);
  if (before != BreakerState::kClosed) {
    // Only the probes decide: a request admitted before the trip says nothing of now.
    if (!probe || before == BreakerState::kOpen) return std::nullopt;
    probes_out_ = std::max(0, probes_out_ - 1);
    switch (verdict) {
      case Verdict::kIgnored:
        return std::nullopt;
      case Verdict::kFailure:
        Open(now, std::chrono::milliseconds(rule_.trip_duration_ms));
        return Transition{before, BreakerState::kOpen};
      case Verdict::kSuccess:
        if (++probes_passed_ < rule_.half_open_probes) return std::nullopt;
        open_ = false;
        probes_out_ = probes_passed_ = 0;
        buckets_.fill(Bucket{});  // a fresh interval: the failures before the trip are history
        return Transition{before, BreakerState::kClosed};
    }
    return std::nullopt;
  }
  if (verdict == Verdict::kIgnored) return std::nullopt;
  Bucket& bucket = Current(now);
  ++bucket.requests;
  if (verdict == Verdict::kSuccess || !ShouldTripAfterFailure(bucket, now)) return std::nullopt;
  const bool by_retry_after = rule_.accept_retry_after && retry_after.count() > 0;
  Open(now, by_retry_after ? retry_after : std::chrono::milliseconds(rule_.trip_duration_ms));
  return Transition{before, BreakerState::kOpen};
}

bool CircuitBreaker::ShouldTripAfterFailure(Bucket& bucket, TimePoint now) {
  ++bucket.failures;
  const int64_t failed = failures(now);
  if (rule_.failure_count > 0 && failed >= rule_.failure_count) return true;
  if (rule_.failure_percentage > 0) {
    const int64_t total = requests(now);
    return total >= rule_.min_requests && failed * 100 >= total * rule_.failure_percentage;
  }
  return false;
}

std::optional<CircuitBreaker::Transition> CircuitBreaker::Trip(TimePoint until, TimePoint now) {
  if (until <= now) return std::nullopt;
  const BreakerState before = state(now);
  if (before == BreakerState::kOpen && open_until_ >= until) return std::nullopt;
  open_ = true;
  open_until_ = until;
  probes_out_ = probes_passed_ = 0;
  if (before == BreakerState::kOpen) return std::nullopt;  // longer, not another trip
  ++trips_;
  return Transition{before, BreakerState::kOpen};
}

void CircuitBreaker::Open(TimePoint now, std::chrono::milliseconds length) {
  open_ = true;
  open_until_ = now + length;
  probes_out_ = probes_passed_ = 0;
  ++trips_;
}

int64_t CircuitBreaker::SlotOf(TimePoint now) const {
  const int64_t tenth_ms = std::max<int64_t>(1, rule_.interval_ms / kBuckets);
  return std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() /
         tenth_ms;
}

CircuitBreaker::Bucket& CircuitBreaker::Current(TimePoint now) {
  const int64_t slot = SlotOf(now);
  Bucket& bucket = buckets_[size_t(slot % kBuckets)];
  if (bucket.slot != slot) bucket = Bucket{slot, 0, 0};
  return bucket;
}

int64_t CircuitBreaker::failures(TimePoint now) const {
  const int64_t slot = SlotOf(now);
  int64_t sum = 0;
  for (const Bucket& b : buckets_) sum += b.slot > slot - kBuckets ? b.failures : 0;
  return sum;
}

int64_t CircuitBreaker::requests(TimePoint now) const {
  const int64_t slot = SlotOf(now);
  int64_t sum = 0;
  for (const Bucket& b : buckets_) sum += b.slot > slot - kBuckets ? b.requests : 0;
  return sum;
}

}  // namespace pillar::upstream
