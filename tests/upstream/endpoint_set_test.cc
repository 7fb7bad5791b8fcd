#include "upstream/endpoint_set.h"

#include <gtest/gtest.h>

#include <map>

namespace pillar::upstream {
namespace {

using std::chrono::seconds;

const EndpointSet::TimePoint kStart{seconds(1000)};

struct Spec {
  std::string zone;
  int priority = 1;
};

models::RemoteConfig Remote(const std::vector<Spec>& specs) {
  models::RemoteConfig remote;
  for (size_t i = 0; i < specs.size(); ++i) {
    models::RemoteEndpoint e;
    e.url = "http://10.0.0." + std::to_string(i + 1) + ":8000";
    e.zone = specs[i].zone;
    e.priority = specs[i].priority;
    remote.endpoints.push_back(e);
  }
  return remote;
}

std::vector<Endpoint> Parsed(const models::RemoteConfig& remote) {
  std::vector<Endpoint> out;
  for (const auto& e : remote.endpoints) out.push_back(*ParseEndpoint(e.url));
  return out;
}

// Which endpoints `set` chooses for `picks` first attempts, finished at once as `outcome`.
std::map<size_t, int> Picks(EndpointSet& set, int picks, EndpointSet::TimePoint now,
                            AttemptOutcome outcome = {}) {
  std::map<size_t, int> chosen;
  std::vector<bool> tried(set.size(), false);
  for (int i = 0; i < picks; ++i) {
    std::optional<Ticket> ticket = set.Start(tried, now);
    if (!ticket) break;
    ++chosen[ticket->endpoint];
    set.Finish(*ticket, outcome, now);
  }
  return chosen;
}

void Fail(EndpointSet& set, size_t e, int times, EndpointSet::TimePoint now) {
  for (int i = 0; i < times; ++i) {
    set.Finish({.endpoint = e, .health_probe = false, .breaker_probe = false},
               {.kind = AttemptOutcome::kStatus,
                .status = 500,
                .retry_after_s = 0,
                .cut_by_caller = false},
               now);
  }
}

TEST(EndpointSetTest, TheLocalZoneIsPreferredWhileItHoldsUp) {
  const models::RemoteConfig remote = Remote({{"a"}, {"a"}, {"b"}, {"b"}});
  EndpointSet set(remote, Parsed(remote), {}, "a", 1);
  std::map<size_t, int> chosen = Picks(set, 200, kStart);
  EXPECT_EQ(chosen[2] + chosen[3], 0);
  EXPECT_GT(chosen[0], 50);
  EXPECT_GT(chosen[1], 50);
  // One of the two local endpoints ejected: half of the zone still holds, so it keeps the
  // traffic on the healthy one.
  Fail(set, 0, 5, kStart);
  ASSERT_EQ(set.slot(0).health.state(kStart), EndpointState::kEjected);
  chosen = Picks(set, 100, kStart);
  EXPECT_EQ(chosen[1], 100);
}

TEST(EndpointSetTest, TheZoneFallsBackToTheWholeGroupWhenItIsMostlyOut) {
  models::RemoteConfig remote = Remote({{"a"}, {"b"}, {"b"}, {"b"}});
  remote.max_ejection_percent = 50;
  EndpointSet set(remote, Parsed(remote), {}, "a", 2);
  Fail(set, 0, 5, kStart);  // the only local endpoint is out
  std::map<size_t, int> chosen = Picks(set, 300, kStart);
  EXPECT_EQ(chosen[0], 0);
  EXPECT_GT(chosen[1], 50);
  EXPECT_GT(chosen[2], 50);
  EXPECT_GT(chosen[3], 50);
}

TEST(EndpointSetTest, NoZoneMeansNoPreference) {
  const models::RemoteConfig remote = Remote({{"a"}, {"b"}});
  EndpointSet set(remote, Parsed(remote), {}, "", 3);
  std::map<size_t, int> chosen = Picks(set, 400, kStart);
  EXPECT_GT(chosen[0], 120);
  EXPECT_GT(chosen[1], 120);
}

TEST(EndpointSetTest, FailingActiveChecksTakeAnEndpointOutUntilTheyPass) {
  const models::RemoteConfig remote = Remote({{""}, {""}, {""}});
  EndpointSet set(remote, Parsed(remote), {}, "", 4);
  EXPECT_FALSE(set.RecordCheck(0, false).failed_checks);  // one failure: below the threshold
  EXPECT_TRUE(set.RecordCheck(0, false).failed_checks);
  EXPECT_EQ(set.slot(0).health.state(kStart), EndpointState::kUnhealthy);
  EXPECT_EQ(Picks(set, 100, kStart)[0], 0);
  EXPECT_TRUE(set.RecordCheck(0, true).back_in_service);  // healthy_threshold = 1
  EXPECT_GT(Picks(set, 300, kStart)[0], 50);
}

TEST(EndpointSetTest, AnOpenEndpointBreakerIsRespectedEvenInPanic) {
  models::RemoteConfig remote = Remote({{""}, {""}});
  remote.breaker.failure_count = 2;
  remote.breaker.trip_duration_ms = 10'000;
  remote.breaker.count_bad_reply = false;  // so that endpoint 1 is ejected without tripping
  remote.max_ejection_percent = 100;
  EndpointSet set(remote, Parsed(remote), {}, "", 5);
  Fail(set, 0, 2, kStart);
  EXPECT_EQ(set.slot(0).breaker.state(kStart), BreakerState::kOpen);
  // Endpoint 1 ejected too: the group is below half, in panic, which ignores the ejection of 1
  // but not the open breaker of 0.
  for (int i = 0; i < 5; ++i) {
    set.Finish({.endpoint = 1, .health_probe = false, .breaker_probe = false},
               {.kind = AttemptOutcome::kBadReply,
                .status = 200,
                .retry_after_s = 0,
                .cut_by_caller = false},
               kStart);
  }
  ASSERT_EQ(set.slot(1).breaker.state(kStart), BreakerState::kClosed);
  ASSERT_EQ(set.slot(1).health.state(kStart), EndpointState::kEjected);
  std::map<size_t, int> chosen = Picks(
      set, 20, kStart,
      {.kind = AttemptOutcome::kTimeout, .status = 0, .retry_after_s = 0, .cut_by_caller = true});
  EXPECT_EQ(chosen[0], 0);
  EXPECT_EQ(chosen[1], 20);
  // The breaker's wait is what the set reports when nothing else is left.
  std::vector<bool> tried = {false, true};
  EXPECT_EQ(set.WaitForAnEndpoint(tried, kStart), seconds(10));
}

TEST(EndpointSetTest, TheBreakerCountsOnlyWhatItsRuleNames) {
  models::RemoteConfig remote = Remote({{""}});
  remote.breaker.failure_count = 1;
  remote.breaker.status_codes.assign(1, std::pair<int, int>(503, 503));
  remote.breaker.count_timeout = false;
  remote.consecutive_failures = 1000;
  EndpointSet set(remote, Parsed(remote), {}, "", 6);
  const Ticket ticket{.endpoint = 0, .health_probe = false, .breaker_probe = false};
  EXPECT_FALSE(set.Finish(ticket,
                          {.kind = AttemptOutcome::kStatus,
                           .status = 500,
                           .retry_after_s = 0,
                           .cut_by_caller = false},
                          kStart)
                   .breaker);
  EXPECT_FALSE(set.Finish(ticket,
                          {.kind = AttemptOutcome::kTimeout,
                           .status = 0,
                           .retry_after_s = 0,
                           .cut_by_caller = false},
                          kStart)
                   .breaker);
  // Cut short by the caller's own deadline: says nothing, whatever the rule.
  EXPECT_FALSE(set.Finish(ticket,
                          {.kind = AttemptOutcome::kStatus,
                           .status = 503,
                           .retry_after_s = 0,
                           .cut_by_caller = true},
                          kStart)
                   .breaker);
  const EndpointChange change = set.Finish(
      ticket,
      {.kind = AttemptOutcome::kStatus, .status = 503, .retry_after_s = 0, .cut_by_caller = false},
      kStart);
  ASSERT_TRUE(change.breaker.has_value());
  EXPECT_EQ(change.breaker->to, BreakerState::kOpen);
}

// Review helper-58: a reload of the backends file made every endpoint a stranger again, so an
// upstream that had sent stray replies got its connections reused at once, and one whose replies
// echo ids had a reply without one taken again.
TEST(EndpointSetTest, WhatAnEndpointShowedOfItsRepliesOutlivesAReload) {
  const models::RemoteConfig remote = Remote({{}, {}});
  EndpointSet before(remote, Parsed(remote), {}, "", 1);
  before.slot(0).echoes_id = true;
  before.slot(1).no_reuse_until = kStart + seconds(120);
  before.slot(1).out_of_step = 2;
  EndpointSet after(remote, Parsed(remote), {}, "", 1);
  EXPECT_TRUE(after.CarryOver(before, kStart).empty());
  EXPECT_TRUE(after.slot(0).echoes_id);
  EXPECT_FALSE(after.slot(1).echoes_id);
  EXPECT_EQ(after.slot(1).no_reuse_until, kStart + seconds(120));
  EXPECT_EQ(after.slot(1).out_of_step, 2);
  EXPECT_EQ(after.slot(0).out_of_step, 0);
}

// A breaker kept across a reload keeps its state; one a new rule starts closed is named with the
// state it left, so the runner reports the transition (it went unlogged and unaudited).
TEST(EndpointSetTest, ABreakerANewRuleClosesIsNamedWithTheStateItLeft) {
  models::RemoteConfig remote = Remote({{""}, {""}});
  remote.breaker.failure_count = 2;
  remote.breaker.trip_duration_ms = 10'000;
  EndpointSet before(remote, Parsed(remote), {}, "", 7);
  Fail(before, 0, 2, kStart);
  ASSERT_EQ(before.slot(0).breaker.state(kStart), BreakerState::kOpen);

  EndpointSet same(remote, Parsed(remote), {}, "", 7);
  EXPECT_TRUE(same.CarryOver(before, kStart).empty());
  EXPECT_EQ(same.slot(0).breaker.state(kStart), BreakerState::kOpen);

  remote.breaker.failure_count = 3;
  EndpointSet changed(remote, Parsed(remote), {}, "", 7);
  const std::vector<std::pair<size_t, BreakerState>> reset = changed.CarryOver(same, kStart);
  ASSERT_EQ(reset.size(), 1u);  // endpoint 1's was closed: nothing to say of it
  EXPECT_EQ(reset[0].first, 0u);
  EXPECT_EQ(reset[0].second, BreakerState::kOpen);
  EXPECT_EQ(changed.slot(0).breaker.state(kStart), BreakerState::kClosed);
}

}  // namespace
}  // namespace pillar::upstream
