// Shared pieces of the limiter tests: a clock the test moves (tests/testing/fake_clock.h), and
// policies with one limit.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "limits/limiter.h"
#include "limits/redis_limiter.h"
#include "policy/policy.h"
#include "testing/fake_clock.h"

namespace pillar::limits {

using ::pillar::testing::FakeClock;

// A policy holding the given [[limit]] tables (and no rules).
inline std::shared_ptr<const policy::Policy> Limits(const std::string& limits) {
  auto p = policy::Policy::Parse("version = 1\n" + limits, "limits.toml");
  if (!p.ok()) std::abort();
  return *p;
}

// What every limiter does with a call's tokens (Limiter::Settle), given `quota`, a quota of
// 1000 tokens per day, and `now_s`, the limiter's present: the admission says what is left, a
// settlement corrects the reservation either way, a refund stops at empty, and a settlement
// past the limit refuses what follows until it is paid back.
inline void ExpectTokensSettle(Limiter& limiter, const policy::LimitRule& quota, int64_t now_s) {
  Charge call{&quota, "tenant-a", 300};
  absl::StatusOr<Verdict> v = limiter.AdmitNow({&call, 1}, "a");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->allowed);
  EXPECT_EQ(v->charge_index, 0);
  EXPECT_EQ(v->limit, 1000);
  EXPECT_EQ(v->remaining, 700);
  Charge used_less{&quota, "tenant-a", -100};  // the call used 200 of the 300 it reserved
  limiter.Settle({&used_less, 1}, now_s);
  call.cost = 800;
  v = limiter.AdmitNow({&call, 1}, "b");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->allowed);
  EXPECT_EQ(v->remaining, 0);
  call.cost = 1;
  v = limiter.AdmitNow({&call, 1}, "c");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->allowed) << "1000 of 1000 used";
  Charge refund_all{&quota, "tenant-a", -5000};  // more than was ever charged: stops at empty
  limiter.Settle({&refund_all, 1}, now_s);
  call.cost = 1000;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "d")->allowed);
  call.cost = 1;
  EXPECT_FALSE(limiter.AdmitNow({&call, 1}, "e")->allowed);
  Charge used_more{&quota, "tenant-a", 50};  // past the limit: never refused
  limiter.Settle({&used_more, 1}, now_s);
  Charge back{&quota, "tenant-a", -1000};
  limiter.Settle({&back, 1}, now_s);  // 50 remain charged
  call.cost = 951;
  v = limiter.AdmitNow({&call, 1}, "f");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->allowed);
  EXPECT_EQ(v->remaining, 950);
  call.cost = 950;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "g")->allowed);
}

// A Redis limiter for a test's redis-server on `port`, with a timeout short enough for tests.
inline RedisLimiterOptions RedisOptions(int port) {
  RedisLimiterOptions o;
  o.port = port;
  o.timeout = absl::Milliseconds(200);
  return o;
}

// Waits (up to 5 s) until `limiter` has connected.
inline bool WaitUp(const RedisLimiter& limiter) {
  for (int i = 0; i < 500 && !limiter.up(); ++i) absl::SleepFor(absl::Milliseconds(10));
  return limiter.up();
}

}  // namespace pillar::limits
