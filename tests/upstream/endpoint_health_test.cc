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
    health.Record(Outcome::kFailure, kStart);
    EXPECT_FALSE(health.WantsEjection()) << i;
  }
  health.Record(Outcome::kSuccess, kStart);  // a success breaks the run
  for (int i = 0; i < 4; ++i) health.Record(Outcome::kFailure, kStart);
  EXPECT_FALSE(health.WantsEjection());
  health.Record(Outcome::kFailure, kStart);
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
  health.Record(Outcome::kSuccess, later);
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
    health.Record(Outcome::kFailure, now);
    EXPECT_EQ(health.state(now), EndpointState::kEjected);
    EXPECT_EQ(health.AvailableAt(now), now + length);
  }
  for (int i = 0; i < 20; ++i) {
    now = health.AvailableAt(now);
    health.Record(Outcome::kFailure, now);
  }
  EXPECT_EQ(health.AvailableAt(now), now + seconds(300));  // max_ejection
  EXPECT_EQ(health.ejections(), 23);
}

TEST(EndpointHealthTest, AQuietPeriodForgetsPastEjections) {
  EndpointHealth health({});
  health.Eject(kStart);
  auto now = health.AvailableAt(kStart);
  health.Record(Outcome::kSuccess, now);                // probe answered
  health.Record(Outcome::kSuccess, now + seconds(31));  // as long again without trouble
  health.Eject(now + seconds(31));
  EXPECT_EQ(health.AvailableAt(now + seconds(31)), now + seconds(61));  // 30 s again, not 60
}

TEST(EndpointHealthTest, RetryAfterKeepsRequestsAwayWithoutHurtingHealth) {
  HealthOptions options;
  options.consecutive_failures = 1;
  EndpointHealth health(options);
  health.Record(Outcome::kThrottled, kStart, seconds(2));
  EXPECT_FALSE(health.WantsEjection());
  EXPECT_EQ(health.state(kStart), EndpointState::kHealthy);
  EXPECT_FALSE(health.Available(kStart + milliseconds(1999)));
  EXPECT_EQ(health.AvailableAt(kStart), kStart + seconds(2));
  EXPECT_TRUE(health.Available(kStart + seconds(2)));
  // A shorter Retry-After later does not shorten the wait already promised.
  health.Record(Outcome::kThrottled, kStart, seconds(5));
  health.Record(Outcome::kThrottled, kStart + seconds(1), seconds(1));
  EXPECT_EQ(health.AvailableAt(kStart), kStart + seconds(5));
}

}  // namespace
}  // namespace pillar::upstream
