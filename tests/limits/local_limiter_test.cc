#include "limits/local_limiter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "limits/limits_testing.h"
#include "testing/temp_dir.h"

namespace pillar::limits {
namespace {

using policy::LimitRule;
using policy::Policy;

// 64 threads race for `n` slots: exactly `n` win.
int64_t Race(Limiter& limiter, const LimitRule& rule, int attempts_per_thread) {
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      const std::string subject = "k";
      for (int i = 0; i < attempts_per_thread; ++i) {
        Charge c{&rule, subject, 1};
        auto v = limiter.AdmitNow({&c, 1}, std::to_string(t * 100000 + i));
        if (v.ok() && v->allowed) admitted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  return admitted.load();
}

TEST(LocalLimiterTest, SixtyFourThreadsGetExactlyTheQuota) {
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 1000\nperiod = \"day\"\n");
  LocalLimiter limiter({});
  EXPECT_EQ(Race(limiter, policy->limits()[0], 50), 1000);
}

TEST(LocalLimiterTest, SixtyFourThreadsGetExactlyTheBurst) {
  // A rate so slow nothing refills during the test: exactly the burst passes.
  auto policy = Limits("[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 0.0001\nburst = 777\n");
  LocalLimiter limiter({});
  EXPECT_EQ(Race(limiter, policy->limits()[0], 50), 777);
}

TEST(LocalLimiterTest, GcraRefillsAtTheRateAndSaysWhenToRetry) {
  auto policy = Limits("[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 10\nburst = 5\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  Charge c{&policy->limits()[0], "k", 1};
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed) << i;
  auto refused = limiter.AdmitNow({&c, 1}, "");
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->limit, 5);
  EXPECT_EQ(refused->remaining, 0);
  EXPECT_EQ(refused->retry_after_ms, 100);
  EXPECT_EQ(refused->reset_ms, 500);
  EXPECT_EQ(refused->rule, &policy->limits()[0]);
  clock.Advance(100'000'000);
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&c, 1}, "")->allowed);
  // Another key has its own bucket.
  Charge other{&policy->limits()[0], "other", 1};
  EXPECT_TRUE(limiter.AdmitNow({&other, 1}, "")->allowed);
}

TEST(LocalLimiterTest, TokensAreReservedAndSettled) {
  auto policy = Limits(
      "[[limit]]\nname = \"t\"\nper = \"tenant\"\nunit = \"tokens\"\nquota = 1000\n"
      "period = \"day\"\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  ExpectTokensSettle(limiter, policy->limits()[0], clock.UnixMicros() / 1'000'000);
}

TEST(LocalLimiterTest, ARefundForAnEndedPeriodIsDroppedAndAFurtherChargeCountsNow) {
  auto policy = Limits(
      "[[limit]]\nname = \"t\"\nper = \"tenant\"\nunit = \"tokens\"\nquota = 1000\n"
      "period = \"day\"\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  const int64_t yesterday = clock.UnixMicros() / 1'000'000;
  Charge call{&policy->limits()[0], "a", 600};
  ASSERT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);
  clock.Advance(int64_t(86'400) * 1'000'000'000);
  call.cost = 100;
  ASSERT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);  // today: 100
  Charge refund{&policy->limits()[0], "a", -600};
  limiter.Settle({&refund, 1}, yesterday);  // yesterday's call: today's count is not touched
  Charge more{&policy->limits()[0], "a", 50};
  limiter.Settle({&more, 1}, yesterday);  // it went on past midnight: counted today
  call.cost = 851;
  EXPECT_FALSE(limiter.AdmitNow({&call, 1}, "")->allowed);
  call.cost = 850;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);
}

TEST(LocalLimiterTest, ATokenRatePerMinuteRefillsAndARefundStopsAtAFullBucket) {
  auto policy = Limits(
      "[[limit]]\nname = \"tpm\"\nper = \"key\"\nunit = \"tokens\"\n"
      "rate_per_minute = 600\n");
  const LimitRule& tpm = policy->limits()[0];
  EXPECT_DOUBLE_EQ(tpm.rate, 10);
  EXPECT_EQ(tpm.burst, 600);  // a minute's worth
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  Charge call{&tpm, "k", 600};
  auto v = limiter.AdmitNow({&call, 1}, "");
  ASSERT_TRUE(v->allowed);
  EXPECT_EQ(v->remaining, 0);
  EXPECT_EQ(v->reset_ms, 60'000);
  call.cost = 1;
  v = limiter.AdmitNow({&call, 1}, "");
  EXPECT_FALSE(v->allowed);
  EXPECT_EQ(v->retry_after_ms, 100);
  Charge refund{&tpm, "k", -300};
  limiter.Settle({&refund, 1}, 0);
  call.cost = 300;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);
  Charge too_much{&tpm, "k", -100'000};
  limiter.Settle({&too_much, 1}, 0);  // a full bucket, not a fuller one
  call.cost = 601;
  EXPECT_FALSE(limiter.AdmitNow({&call, 1}, "")->allowed);
  call.cost = 600;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);
  clock.Advance(6'000'000'000);  // six seconds: 60 tokens
  call.cost = 61;
  EXPECT_FALSE(limiter.AdmitNow({&call, 1}, "")->allowed);
  call.cost = 60;
  EXPECT_TRUE(limiter.AdmitNow({&call, 1}, "")->allowed);
}

TEST(LocalLimiterTest, ElementsAreUnitsAndARequestBiggerThanTheBurstCanNeverPass) {
  auto policy = Limits(
      "[[limit]]\nname = \"e\"\nper = \"key\"\nunit = \"elements\"\nrate = 1000\nburst = 640\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  Charge c{&policy->limits()[0], "k", 640};
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed);
  c.cost = 64;
  EXPECT_FALSE(limiter.AdmitNow({&c, 1}, "")->allowed);
  c.cost = 641;
  clock.Advance(10'000'000'000);
  auto never = limiter.AdmitNow({&c, 1}, "");
  EXPECT_FALSE(never->allowed);
  EXPECT_EQ(never->retry_after_ms, -1);
}

TEST(LocalLimiterTest, TheSlowestRateTimesTheLargestShareStaysInRange) {
  // The slowest rate the parser takes, split 10,000 ways, charged a large burst: the bucket's
  // arithmetic must neither overflow nor wrap into "allowed".
  auto policy = Limits(
      "[[limit]]\nname = \"slow\"\nper = \"key\"\nunit = \"elements\"\nrate = 1e-6\n"
      "burst = 1000000000\n");
  LocalLimiter limiter({.divisor = 10'000});
  Charge c{&policy->limits()[0], "k", 100'000};
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "")->allowed);
  auto refused = limiter.AdmitNow({&c, 1}, "");
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->allowed);
  EXPECT_GT(refused->retry_after_ms, 0);
  EXPECT_LE(refused->retry_after_ms, int64_t(1e15));
  EXPECT_FALSE(
      Policy::Parse("version = 1\n[[limit]]\nname = \"x\"\nper = \"key\"\nrate = 1e-9\n", "p.toml")
          .ok());
}

TEST(LocalLimiterTest, ConcurrencySlotsComeBackOnRelease) {
  auto policy = Limits("[[limit]]\nname = \"c\"\nper = \"model\"\nconcurrency = 2\n");
  LocalLimiter limiter({});
  Charge c{&policy->limits()[0], "digits", 1};
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "a")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "b")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&c, 1}, "c")->allowed);
  limiter.Release({&c, 1}, "a");
  EXPECT_TRUE(limiter.AdmitNow({&c, 1}, "c")->allowed);
}

TEST(LocalLimiterTest, ARefusalTakesNothingFromTheOtherCounters) {
  auto policy = Limits(
      "[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 0.0001\nburst = 3\n"
      "[[limit]]\nname = \"q\"\nper = \"tenant\"\nquota = 1\nperiod = \"day\"\n");
  LocalLimiter limiter({});
  Charge both[] = {{&policy->limits()[0], "k", 1}, {&policy->limits()[1], "acme", 1}};
  EXPECT_TRUE(limiter.AdmitNow(both, "")->allowed);
  auto refused = limiter.AdmitNow(both, "");
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->charge_index, 1);
  EXPECT_EQ(refused->rule->name, "q");
  // The rate bucket lost nothing to the refused requests: two more fit.
  Charge rate_only{&policy->limits()[0], "k", 1};
  EXPECT_TRUE(limiter.AdmitNow({&rate_only, 1}, "")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&rate_only, 1}, "")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&rate_only, 1}, "")->allowed);
}

TEST(LocalLimiterTest, APrincipalsOwnCounterIsApartFromATenantOfTheSameName) {
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"tenant\"\nquota = 1\nperiod = \"day\"\n");
  LocalLimiter limiter({});
  Charge principal{&policy->limits()[0], "key:abc", 1, /*by_principal=*/true};
  Charge tenant{&policy->limits()[0], "key:abc", 1};
  EXPECT_TRUE(limiter.AdmitNow({&principal, 1}, "")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&tenant, 1}, "")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&principal, 1}, "")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&tenant, 1}, "")->allowed);
}

TEST(LocalLimiterTest, QuotasRenewAtTheStartOfTheNextUtcPeriod) {
  auto policy = Limits(
      "[[limit]]\nname = \"d\"\nper = \"key\"\nquota = 2\nperiod = \"day\"\n"
      "[[limit]]\nname = \"m\"\nper = \"key\"\nquota = 3\nperiod = \"month\"\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  Charge day{&policy->limits()[0], "k", 1};
  Charge month{&policy->limits()[1], "k", 1};
  EXPECT_TRUE(limiter.AdmitNow({&day, 1}, "")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&day, 1}, "")->allowed);
  auto refused = limiter.AdmitNow({&day, 1}, "");
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->renews_at_s, 1'800'057'600);     // 2027-01-16T00:00:00Z
  clock.Advance(int64_t(16) * 3600 * 1'000'000'000);  // past midnight
  EXPECT_TRUE(limiter.AdmitNow({&day, 1}, "")->allowed);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.AdmitNow({&month, 1}, "")->allowed);
  auto month_refused = limiter.AdmitNow({&month, 1}, "");
  EXPECT_FALSE(month_refused->allowed);
  EXPECT_EQ(month_refused->renews_at_s, 1'801'440'000);  // 2027-02-01T00:00:00Z
  EXPECT_EQ(PeriodEnd(LimitRule::Period::kMonth, 1'796'083'200), 1'798'761'600);  // Dec -> Jan
}

TEST(LocalLimiterTest, ADivisorEnforcesAnEqualShareOfEveryLimit) {
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 90\nperiod = \"day\"\n");
  LocalLimiter limiter({.divisor = 3});
  EXPECT_EQ(Race(limiter, policy->limits()[0], 10), 30);
}

TEST(LocalLimiterTest, QuotaUsageSurvivesARestart) {
  testing::TempDir dir;
  auto store = state::OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok());
  auto policy = Limits("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 10\nperiod = \"month\"\n");
  Charge c{&policy->limits()[0], "k", 1};
  FakeClock clock;
  {
    LocalLimiter first(
        {.store = store->get(), .flush_interval = absl::ZeroDuration(), .clock = &clock});
    ASSERT_TRUE(first.LoadQuotas().ok());
    for (int i = 0; i < 7; ++i) EXPECT_TRUE(first.AdmitNow({&c, 1}, "")->allowed);
  }  // flushes on destruction
  LocalLimiter second(
      {.store = store->get(), .flush_interval = absl::ZeroDuration(), .clock = &clock});
  ASSERT_TRUE(second.LoadQuotas().ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(second.AdmitNow({&c, 1}, "")->allowed);
  EXPECT_FALSE(second.AdmitNow({&c, 1}, "")->allowed);
}

TEST(LocalLimiterTest, IdleCountersArePrunedAndLiveOnesKept) {
  testing::TempDir dir;
  auto store = state::OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok());
  auto policy = Limits(
      "[[limit]]\nname = \"r\"\nper = \"key\"\nrate = 10\nburst = 5\n"
      "[[limit]]\nname = \"m\"\nper = \"key\"\nquota = 3\nperiod = \"month\"\n");
  FakeClock clock;
  LocalLimiter limiter(
      {.store = store->get(), .flush_interval = absl::Milliseconds(5), .clock = &clock});
  ASSERT_TRUE(limiter.LoadQuotas().ok());
  for (int k = 0; k < 100; ++k) {
    const std::string subject = "k" + std::to_string(k);
    Charge both[] = {{&policy->limits()[0], subject, 1}, {&policy->limits()[1], subject, 1}};
    ASSERT_TRUE(limiter.AdmitNow(both, "")->allowed);
  }
  EXPECT_EQ(limiter.counters(), 200u);
  clock.Advance(1'000'000'000);  // every bucket refilled; the month goes on
  for (int i = 0; i < 200 && limiter.counters() != 100u; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(limiter.counters(), 100u);  // the quotas stay: they hold this month's usage
  Charge again{&policy->limits()[1], "k0", 1};
  EXPECT_TRUE(limiter.AdmitNow({&again, 1}, "")->allowed);
  EXPECT_TRUE(limiter.AdmitNow({&again, 1}, "")->allowed);
  EXPECT_FALSE(limiter.AdmitNow({&again, 1}, "")->allowed);
}

}  // namespace
}  // namespace pillar::limits
