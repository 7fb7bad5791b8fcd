#include "upstream/circuit_breaker.h"

#include <gtest/gtest.h>

namespace pillar::upstream {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Verdict = CircuitBreaker::Verdict;
using Admission = CircuitBreaker::Admission;

const CircuitBreaker::TimePoint kStart{seconds(1000)};

models::BreakerRule ByCount(int count) {
  models::BreakerRule rule;
  rule.failure_count = count;
  rule.interval_ms = 10'000;
  rule.trip_duration_ms = 5'000;
  return rule;
}

TEST(CircuitBreakerTest, OffWithoutAThreshold) {
  CircuitBreaker breaker(models::BreakerRule{});
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart, false), std::nullopt);
  }
  EXPECT_EQ(breaker.Admit(kStart), Admission::kAdmitted);
}

TEST(CircuitBreakerTest, TripsOnTheCountWithinTheIntervalAndRefusesUntilTheTripEnds) {
  CircuitBreaker breaker(ByCount(3));
  EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart, false), std::nullopt);
  EXPECT_EQ(breaker.Record(Verdict::kSuccess, kStart, false), std::nullopt);
  EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart, false), std::nullopt);
  const auto change = breaker.Record(Verdict::kFailure, kStart + seconds(1), false);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->from, BreakerState::kClosed);
  EXPECT_EQ(change->to, BreakerState::kOpen);
  EXPECT_EQ(breaker.trips(), 1);
  EXPECT_EQ(breaker.Admit(kStart + seconds(5)), Admission::kRefused);
  EXPECT_EQ(breaker.open_until(), kStart + seconds(6));
  EXPECT_EQ(breaker.state(kStart + seconds(6)), BreakerState::kHalfOpen);
}

TEST(CircuitBreakerTest, FailuresOlderThanTheIntervalDoNotCount) {
  CircuitBreaker breaker(ByCount(3));
  breaker.Record(Verdict::kFailure, kStart, false);
  breaker.Record(Verdict::kFailure, kStart, false);
  // 11 s later the first two have left the window.
  EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart + seconds(11), false), std::nullopt);
  EXPECT_EQ(breaker.failures(kStart + seconds(11)), 1);
  EXPECT_EQ(breaker.state(kStart + seconds(11)), BreakerState::kClosed);
}

TEST(CircuitBreakerTest, APercentageNeedsTheMinimumNumberOfRequests) {
  models::BreakerRule rule;
  rule.failure_percentage = 50;
  rule.min_requests = 10;
  CircuitBreaker breaker(rule);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart, false), std::nullopt) << i;
  }
  // The tenth request, a failure: 10 of 10.
  EXPECT_TRUE(breaker.Record(Verdict::kFailure, kStart, false).has_value());

  CircuitBreaker mixed(rule);
  for (int i = 0; i < 12; ++i) mixed.Record(Verdict::kSuccess, kStart, false);
  for (int i = 0; i < 11; ++i) {
    EXPECT_EQ(mixed.Record(Verdict::kFailure, kStart, false), std::nullopt) << i;  // < 50 %
  }
  EXPECT_TRUE(mixed.Record(Verdict::kFailure, kStart, false).has_value());  // 12 of 24
}

TEST(CircuitBreakerTest, HalfOpenLetsTheConfiguredProbesThroughAndAllMustSucceed) {
  models::BreakerRule rule = ByCount(1);
  rule.half_open_probes = 2;
  CircuitBreaker breaker(rule);
  breaker.Record(Verdict::kFailure, kStart, false);
  const auto later = kStart + seconds(5);
  EXPECT_EQ(breaker.Admit(later), Admission::kProbe);
  EXPECT_EQ(breaker.Admit(later), Admission::kProbe);
  EXPECT_EQ(breaker.Admit(later), Admission::kRefused);  // two at most
  EXPECT_EQ(breaker.Record(Verdict::kSuccess, later, true), std::nullopt);
  const auto closed = breaker.Record(Verdict::kSuccess, later, true);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->from, BreakerState::kHalfOpen);
  EXPECT_EQ(closed->to, BreakerState::kClosed);
  EXPECT_EQ(breaker.failures(later), 0);  // a fresh interval
}

TEST(CircuitBreakerTest, AFailedProbeOpensAgainAndAnInconclusiveOneFreesItsPlace) {
  CircuitBreaker breaker(ByCount(1));
  breaker.Record(Verdict::kFailure, kStart, false);
  const auto later = kStart + seconds(5);
  ASSERT_EQ(breaker.Admit(later), Admission::kProbe);
  EXPECT_EQ(breaker.Admit(later), Admission::kRefused);
  EXPECT_EQ(breaker.Record(Verdict::kIgnored, later, true), std::nullopt);
  ASSERT_EQ(breaker.Admit(later), Admission::kProbe);  // the place is free again
  const auto reopened = breaker.Record(Verdict::kFailure, later, true);
  ASSERT_TRUE(reopened.has_value());
  EXPECT_EQ(reopened->from, BreakerState::kHalfOpen);
  EXPECT_EQ(breaker.open_until(), later + seconds(5));
  EXPECT_EQ(breaker.trips(), 2);
}

TEST(CircuitBreakerTest, RequestsAdmittedBeforeATripDoNotDecideIt) {
  CircuitBreaker breaker(ByCount(1));
  breaker.Record(Verdict::kFailure, kStart, false);
  // Stragglers from before the trip: neither a success nor a failure changes it.
  EXPECT_EQ(breaker.Record(Verdict::kSuccess, kStart + seconds(5), false), std::nullopt);
  EXPECT_EQ(breaker.Record(Verdict::kFailure, kStart + seconds(5), false), std::nullopt);
  EXPECT_EQ(breaker.state(kStart + seconds(5)), BreakerState::kHalfOpen);
  EXPECT_EQ(breaker.open_until(), kStart + seconds(5));
}

TEST(CircuitBreakerTest, RetryAfterSetsTheTripWhenAccepted) {
  models::BreakerRule rule = ByCount(1);
  CircuitBreaker accepting(rule);
  accepting.Record(Verdict::kFailure, kStart, false, seconds(42));
  EXPECT_EQ(accepting.open_until(), kStart + seconds(42));
  rule.accept_retry_after = false;
  CircuitBreaker ignoring(rule);
  ignoring.Record(Verdict::kFailure, kStart, false, seconds(42));
  EXPECT_EQ(ignoring.open_until(), kStart + seconds(5));
}

TEST(CircuitBreakerTest, ATripFromAPeerOpensOrLengthensButNeverShortens) {
  CircuitBreaker breaker(ByCount(10));
  const auto change = breaker.Trip(kStart + seconds(20), kStart);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->to, BreakerState::kOpen);
  EXPECT_EQ(breaker.Trip(kStart + seconds(10), kStart), std::nullopt);
  EXPECT_EQ(breaker.open_until(), kStart + seconds(20));
  EXPECT_EQ(breaker.Trip(kStart + seconds(30), kStart), std::nullopt);  // longer, same trip
  EXPECT_EQ(breaker.open_until(), kStart + seconds(30));
  EXPECT_EQ(breaker.Trip(kStart, kStart), std::nullopt);  // already over
  EXPECT_EQ(breaker.trips(), 1);
}

TEST(CircuitBreakerTest, StatusRangesSayWhatCounts) {
  models::BreakerRule rule;
  rule.status_codes = {{500, 599}, {429, 429}};
  EXPECT_TRUE(rule.CountsStatus(429));
  EXPECT_TRUE(rule.CountsStatus(503));
  EXPECT_FALSE(rule.CountsStatus(404));
  EXPECT_FALSE(rule.CountsStatus(600));
}

}  // namespace
}  // namespace pillar::upstream
