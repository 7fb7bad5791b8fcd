#include "upstream/endpoint_health.h"

#include <gtest/gtest.h>

namespace pillar::upstream {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Outcome = EndpointHealth::Outcome;

const EndpointHealth::TimePoint kStart{seconds(1000)};

TEST(EndpointHealthTest, ConsecutiveFailuresAskForAnEjection) {
  EndpointHealth health({});
  for (int i = 0; i < 4; ++i) {
    health.Record(Outcome::kFailure, kStart, false);
    EXPECT_FALSE(health.WantsEjection()) << i;
  }
  health.Record(Outcome::kSuccess, kStart, false);  // a success breaks the run
  for (int i = 0; i < 4; ++i) health.Record(Outcome::kFailure, kStart, false);
  EXPECT_FALSE(health.WantsEjection());
  health.Record(Outcome::kFailure, kStart, false);
  EXPECT_TRUE(health.WantsEjection());
  EXPECT_EQ(health.state(kStart), EndpointState::kHealthy);  // the set decides
}

TEST(EndpointHealthTest, AnEjectionEndsInOneProbeThatDecides) {
  EndpointHealth health({});
  health.Eject(kStart);
  EXPECT_EQ(health.state(kStart), EndpointState::kEjected);
  EXPECT_FALSE(health.Available(kStart + seconds(29)));
  EXPECT_EQ(health.AvailableAt(kStart), kStart + seconds(30));
  const auto later = kStart + seconds(30);
  EXPECT_EQ(health.state(later), EndpointState::kHalfOpen);
  ASSERT_TRUE(health.Available(later));
  health.StartProbe();
  EXPECT_FALSE(health.Available(later));  // one probe at a time
  health.Record(Outcome::kSuccess, later, true);
  EXPECT_EQ(health.state(later), EndpointState::kHealthy);
  EXPECT_TRUE(health.Available(later));
}

TEST(EndpointHealthTest, AFailedProbeEjectsForLongerUpToTheCap) {
  EndpointHealth health({});
  auto now = kStart;
  health.Eject(now);
  std::chrono::milliseconds expected[] = {milliseconds(60'000), milliseconds(90'000)};
  for (milliseconds length : expected) {
    now = health.AvailableAt(now);
    health.StartProbe();
    health.Record(Outcome::kFailure, now, true);
    EXPECT_EQ(health.state(now), EndpointState::kEjected);
    EXPECT_EQ(health.AvailableAt(now), now + length);
  }
  for (int i = 0; i < 20; ++i) {
    now = health.AvailableAt(now);
    health.Record(Outcome::kFailure, now, true);
  }
  EXPECT_EQ(health.AvailableAt(now), now + seconds(300));  // max_ejection
  EXPECT_EQ(health.ejections(), 23);
}

TEST(EndpointHealthTest, AQuietPeriodForgetsPastEjections) {
  EndpointHealth health({});
  health.Eject(kStart);
  auto now = health.AvailableAt(kStart);
  health.Record(Outcome::kSuccess, now, true);                 // probe answered
  health.Record(Outcome::kSuccess, now + seconds(31), false);  // as long again, no trouble
  health.Eject(now + seconds(31));
  EXPECT_EQ(health.AvailableAt(now + seconds(31)), now + seconds(61));  // 30 s again, not 60
}

TEST(EndpointHealthTest, RetryAfterKeepsRequestsAwayWithoutHurtingHealth) {
  HealthOptions options;
  options.consecutive_failures = 1;
  EndpointHealth health(options);
  health.Record(Outcome::kThrottled, kStart, false, seconds(2));
  EXPECT_FALSE(health.WantsEjection());
  EXPECT_EQ(health.state(kStart), EndpointState::kHealthy);
  EXPECT_FALSE(health.Available(kStart + milliseconds(1999)));
  EXPECT_EQ(health.AvailableAt(kStart), kStart + seconds(2));
  EXPECT_TRUE(health.Available(kStart + seconds(2)));
  // A shorter Retry-After later does not shorten the wait already promised.
  health.Record(Outcome::kThrottled, kStart, false, seconds(5));
  health.Record(Outcome::kThrottled, kStart + seconds(1), false, seconds(1));
  EXPECT_EQ(health.AvailableAt(kStart), kStart + seconds(5));
}

TEST(EndpointHealthTest, OnlyTheProbeDecidesWhileTheEndpointIsOut) {
  EndpointHealth health({});
  health.Eject(kStart);
  // Attempts sent before the ejection come back during it: neither lengthens nor ends it.
  health.Record(Outcome::kFailure, kStart + seconds(1), false);
  health.Record(Outcome::kSuccess, kStart + seconds(2), false);
  EXPECT_EQ(health.ejections(), 1);
  EXPECT_EQ(health.AvailableAt(kStart + seconds(2)), kStart + seconds(30));
  const auto later = kStart + seconds(30);
  ASSERT_TRUE(health.Available(later));
  health.StartProbe();
  // A probe its caller's deadline cut short says nothing: the next request probes.
  health.Record(Outcome::kInconclusive, later, true);
  EXPECT_TRUE(health.Available(later));
  EXPECT_EQ(health.state(later), EndpointState::kHalfOpen);
}

TEST(EndpointHealthTest, AnInconclusiveAttemptLeavesTheCountAlone) {
  HealthOptions options;
  options.consecutive_failures = 2;
  EndpointHealth health(options);
  health.Record(Outcome::kFailure, kStart, false);
  for (int i = 0; i < 10; ++i) health.Record(Outcome::kInconclusive, kStart, false);
  EXPECT_FALSE(health.WantsEjection());
  health.Record(Outcome::kFailure, kStart, false);
  EXPECT_TRUE(health.WantsEjection());
}

}  // namespace
}  // namespace pillar::upstream
