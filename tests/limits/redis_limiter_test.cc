// The Redis limiter against a real redis-server that the test starts (and kills).
#include "limits/redis_limiter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "limits/limits_testing.h"
#include "testing/redis_server.h"

namespace pillar::limits {
namespace {

using policy::LimitRule;

TEST(RedisLimiterTest, ThreeInstancesSharingOneRedisAdmitExactlyTheLimit) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits(
      "[[limit]]\nname = \"q\"\nper = \"tenant\"\nquota = 500\nperiod = \"day\"\n"
      "[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 0.0001\nburst = 400\n");
  std::vector<std::unique_ptr<RedisLimiter>> instances;
  for (int i = 0; i < 3; ++i) {
    instances.push_back(std::make_unique<RedisLimiter>(RedisOptions(redis.port())));
    ASSERT_TRUE(WaitUp(*instances.back()));
  }
  // 64 clients spread over the three instances, 20 requests each: the burst of 400 binds.
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 64; ++t) {
    clients.emplace_back([&, t] {
      RedisLimiter& mine = *instances[size_t(t % 3)];
      Charge charges[] = {{&policy->limits()[0], "acme", 1}, {&policy->limits()[1], "key1", 1}};
      for (int i = 0; i < 20; ++i) {
        auto v = mine.AdmitNow(charges, std::to_string(t * 1000 + i));
        ASSERT_TRUE(v.ok()) << v.status();
        if (v->allowed) admitted.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(admitted.load(), 400);
  // The quota counted only the admitted requests: 100 of its 500 remain.
  Charge quota_only{&policy->limits()[0], "acme", 1};
  int64_t more = 0;
  for (int i = 0; i < 150; ++i) more += instances[0]->AdmitNow({&quota_only, 1}, "x")->allowed;
  EXPECT_EQ(more, 100);
}

TEST(RedisLimiterTest, APrincipalsOwnCounterIsApartFromATenantOfTheSameName) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"tenant\"\nquota = 1\nperiod = \"day\"\n");
  RedisLimiter limiter(RedisOptions(redis.port()));
  ASSERT_TRUE(WaitUp(limiter));
  Charge principal{&policy->limits()[0], "key:abc", 1, /*by_principal=*/true};
  Charge tenant{&policy->limits()[0], "key:abc", 1};
  EXPECT_TRUE(limiter.AdmitNow({&principal, 1}, "a")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&tenant, 1}, "b")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&principal, 1}, "c")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&tenant, 1}, "d")->allowed);
}

TEST(RedisLimiterTest, TokensAreReservedAndSettled) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits(
      "[[limit]]\nname = \"t\"\nper = \"tenant\"\nunit = \"tokens\"\nquota = 1000\n"
      "period = \"day\"\n"
      "[[limit]]\nname = \"tpm\"\nper = \"tenant\"\nunit = \"tokens\"\n"
      "rate_per_minute = 0.06\nburst = 500\n");
  RedisLimiter limiter(RedisOptions(redis.port()));
  ASSERT_TRUE(WaitUp(limiter));
  // Settlements are pipelined on the limiter's one connection: each lands before the admission
  // that follows it.
  ExpectTokensSettle(limiter, policy->limits()[0], absl::ToUnixSeconds(absl::Now()));
  // A rate (one token in 1000 s: nothing refills here) settles the same way, and an admission
  // describes the charge with the fewest tokens left.
  const LimitRule& tpm = policy->limits()[1];
  Charge both[] = {{&policy->limits()[0], "tenant-b", 400}, {&tpm, "tenant-b", 400}};
  auto v = limiter.AdmitNow(both, "h");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->allowed);
  EXPECT_EQ(v->charge_index, 1);
  EXPECT_EQ(v->limit, 500);
  EXPECT_EQ(v->remaining, 100);
  Charge refund{&tpm, "tenant-b", -300};
  limiter.Settle({&refund, 1}, absl::ToUnixSeconds(absl::Now()));
  Charge rate{&tpm, "tenant-b", 401};
  EXPECT_FALSE(limiter.AdmitNow({&rate, 1}, "i")->allowed);
  rate.cost = 400;
  EXPECT_TRUE(limiter.AdmitNow({&rate, 1}, "j")->allowed);
}

TEST(RedisLimiterTest, RefusalsCarryTheNumbersAndConcurrencyLeasesAreReleased) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits(
      "[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 10\nburst = 2\n"
      "[[limit]]\nname = \"c\"\nper = \"model\"\nconcurrency = 1\n");
  RedisLimiter limiter(RedisOptions(redis.port()));
  ASSERT_TRUE(WaitUp(limiter));
  Charge rate{&policy->limits()[0], "k", 1};
  EXPECT_TRUE(limiter.AdmitNow({&rate, 1}, "a")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&rate, 1}, "b")->allowed);
  auto refused = limiter.AdmitNow({&rate, 1}, "c");
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->charge_index, 0);
  EXPECT_EQ(refused->limit, 2);
  EXPECT_GT(refused->retry_after_ms, 0);
  EXPECT_LE(refused->retry_after_ms, 100);

  Charge slot{&policy->limits()[1], "digits", 1};
  EXPECT_TRUE(limiter.AdmitNow({&slot, 1}, "lease-1")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&slot, 1}, "lease-2")->allowed);
  limiter.Release({&slot, 1}, "lease-1");
  bool admitted = false;  // the release is pipelined; it lands before or with the next command
  for (int i = 0; i < 50 && !admitted; ++i)
    admitted = limiter.AdmitNow({&slot, 1}, "lease-2")->allowed;
  EXPECT_TRUE(admitted);
}

TEST(RedisLimiterTest, AnOutageIsAnErrorNotARefusalAndRecoveryIsAutomatic) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 1000\nperiod = \"day\"\n");
  monitor::MetricsRegistry metrics;
  RedisLimiterOptions options = RedisOptions(redis.port());
  options.metrics = &metrics;
  RedisLimiter limiter(options);
  ASSERT_TRUE(WaitUp(limiter));
  Charge c{&policy->limits()[0], "k", 1};
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed);

  redis.Kill();
  const absl::Time start = absl::Now();
  auto during = limiter.AdmitNow({&c, 1}, "");
  EXPECT_EQ(during.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // bounded by the timeout, not a hang
  EXPECT_FALSE(limiter.up());
  // While down, refusals are immediate.
  const absl::Time fast = absl::Now();
  EXPECT_FALSE(limiter.AdmitNow({&c, 1}, "").ok());
  EXPECT_LT(absl::Now() - fast, absl::Milliseconds(100));
  EXPECT_NE(metrics.Render().find("pillar_limiter_backend_up 0"), std::string::npos);

  ASSERT_TRUE(redis.Start());  // same port, empty
  ASSERT_TRUE(WaitUp(limiter));
  bool ok = false;
  for (int i = 0; i < 100 && !ok; ++i) {
    auto v = limiter.AdmitNow({&c, 1}, "");
    ok = v.ok() && v->allowed;
    if (!ok) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(ok);
  EXPECT_NE(metrics.Render().find("pillar_limiter_backend_up 1"), std::string::npos);
}

TEST(RedisLimiterTest, AFlushedScriptIsLoadedAgainWithoutFailingTheRequest) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 5\nperiod = \"day\"\n");
  Charge c{&policy->limits()[0], "k", 1};
  RedisLimiter limiter(RedisOptions(redis.port()));
  ASSERT_TRUE(WaitUp(limiter));
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed);
  ASSERT_EQ(redis.Command("SCRIPT FLUSH"), "+OK\r\n");
  auto after = limiter.AdmitNow({&c, 1}, "");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->allowed);
  int admitted = 2;
  for (int i = 0; i < 5; ++i) admitted += limiter.AdmitNow({&c, 1}, "")->allowed;
  EXPECT_EQ(admitted, 5);  // the counts survived: only the script was gone
}

TEST(RedisLimiterTest, AuthenticatesWithThePasswordAndTreatsARefusalAsAnOutage) {
  testing::RedisServer redis;
  redis.SetPassword("s3cret-for-tests");
  ASSERT_TRUE(redis.Start());
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 5\nperiod = \"day\"\n");
  Charge c{&policy->limits()[0], "k", 1};
  RedisLimiterOptions right = RedisOptions(redis.port());
  right.password = "s3cret-for-tests";
  RedisLimiter with_password(right);
  ASSERT_TRUE(WaitUp(with_password));
  EXPECT_TRUE(with_password.AdmitNow({&c, 1}, "")->allowed);
  RedisLimiterOptions wrong = RedisOptions(redis.port());
  wrong.password = "guess";
  RedisLimiter without(wrong);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(without.up());
  EXPECT_EQ(without.AdmitNow({&c, 1}, "").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pillar::limits
