#include "stages/admit_stage.h"

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "audit/audit_sink.h"
#include "limits/limits_testing.h"
#include "limits/local_limiter.h"
#include "limits/redis_limiter.h"
#include "pipeline/chain.h"

namespace pillar::limits {
namespace {

using stages::AdmitStage;

class RecordingSink final : public audit::AuditSink {
 public:
  bool Record(const audit::Event& e) override {
    events.push_back({e.kind, e.allowed, std::string(e.principal), e.explain()});
    return true;
  }
  struct Seen {
    audit::EventKind kind;
    bool allowed;
    std::string principal;
    std::string reason;
  };
  std::vector<Seen> events;
};

std::string Header(const pipeline::Exchange& ex, std::string_view name) {
  for (const auto& [k, v] : ex.response.headers) {
    if (k == name) return v;
  }
  return "";
}

struct Fixture {
  Fixture(const std::string& limits) : policy(Limits(limits)) {
    auto p = std::make_shared<identity::Principal>();
    p->id = "key:abc";
    p->key_id = "abc";
    p->tenant = "acme";
    principal = p;
  }
  std::unique_ptr<pipeline::Exchange> Request() {
    auto ex = std::make_unique<pipeline::Exchange>();
    ex->principal = principal;
    ex->policy = policy;
    ex->action = "infer";
    ex->resource = "model:digits/1";
    ex->request_id = "r" + std::to_string(++n);
    return ex;
  }
  std::shared_ptr<const policy::Policy> policy;
  std::shared_ptr<const identity::Principal> principal;
  int n = 0;
};

TEST(AdmitStageTest, AnExhaustedQuotaAnswers429WithHeadersAndSaysWhenItRenews) {
  Fixture f("[[limit]]\nname = \"tenant-daily\"\nper = \"tenant\"\nquota = 2\nperiod = \"day\"\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  RecordingSink audit;
  AdmitStage stage(limiter, nullptr, audit, nullptr);
  for (int i = 0; i < 2; ++i) {
    auto ex = f.Request();
    EXPECT_EQ(stage.OnRequest(*ex), pipeline::StageResult::kContinue);
  }
  auto ex = f.Request();
  EXPECT_EQ(stage.OnRequest(*ex), pipeline::StageResult::kStop);
  EXPECT_EQ(ex->response.status, 429);
  EXPECT_EQ(ex->response.body,
            R"({"error":"quota 'tenant-daily' for tenant 'acme' exhausted: 2 requests per day; )"
            R"(renews at 2027-01-16T00:00:00Z","limit":"tenant-daily","per":"tenant",)"
            R"("renews_at":"2027-01-16T00:00:00Z"})");
  EXPECT_EQ(Header(*ex, "RateLimit-Limit"), "2");
  EXPECT_EQ(Header(*ex, "RateLimit-Remaining"), "0");
  EXPECT_EQ(Header(*ex, "RateLimit-Reset"), "57600");
  EXPECT_EQ(Header(*ex, "Retry-After"), "57600");
  ASSERT_EQ(audit.events.size(), 3u);
  EXPECT_TRUE(audit.events[0].allowed);
  EXPECT_FALSE(audit.events[2].allowed);
  EXPECT_EQ(audit.events[2].kind, audit::EventKind::kLimit);
  EXPECT_EQ(audit.events[2].principal, "key:abc");
}

TEST(AdmitStageTest, LimitsApplyOnlyToMatchingActionsResourcesAndTenants) {
  Fixture f(
      "[[limit]]\nname = \"beta-only\"\nper = \"key\"\nquota = 1\nperiod = \"day\"\n"
      "tenants = [\"beta\"]\n"
      "[[limit]]\nname = \"lite-only\"\nper = \"key\"\nquota = 1\nperiod = \"day\"\n"
      "resources = [\"model:digits-lite/*\"]\n");
  LocalLimiter limiter({});
  RecordingSink audit;
  AdmitStage stage(limiter, nullptr, audit, nullptr);
  for (int i = 0; i < 5; ++i) {
    auto ex = f.Request();
    AdmitStage::Charges charges;
    AdmitStage::CollectCharges(*ex, charges);
    EXPECT_TRUE(charges.empty());
    EXPECT_EQ(stage.OnRequest(*ex), pipeline::StageResult::kContinue);
  }
  auto lite = f.Request();
  lite->resource = "model:digits-lite/1";
  EXPECT_EQ(stage.OnRequest(*lite), pipeline::StageResult::kContinue);
  auto again = f.Request();
  again->resource = "model:digits-lite/1";
  EXPECT_EQ(stage.OnRequest(*again), pipeline::StageResult::kStop);
}

std::shared_ptr<const identity::Principal> Tenantless(const std::string& id) {
  auto p = std::make_shared<identity::Principal>();
  p->id = id;
  return p;
}

TEST(AdmitStageTest, PrincipalsWithoutATenantDoNotShareAPerTenantCounter) {
  Fixture f("[[limit]]\nname = \"tenant-daily\"\nper = \"tenant\"\nquota = 1\nperiod = \"day\"\n");
  FakeClock clock;
  LocalLimiter limiter({.clock = &clock});
  RecordingSink audit;
  AdmitStage stage(limiter, nullptr, audit, nullptr);
  auto request_as = [&](std::shared_ptr<const identity::Principal> who) {
    auto ex = f.Request();
    ex->principal = std::move(who);
    return ex;
  };
  auto admin = Tenantless("key:admin1");
  auto first = request_as(admin);
  AdmitStage::Charges charges;
  AdmitStage::CollectCharges(*first, charges);
  ASSERT_EQ(charges.size(), 1u);
  EXPECT_EQ(charges[0].subject, "key:admin1");
  EXPECT_TRUE(charges[0].by_principal);
  EXPECT_EQ(stage.OnRequest(*first), pipeline::StageResult::kContinue);
  // Another principal without a tenant has a quota of its own, not what is left of the first's.
  auto other = request_as(Tenantless("mtls:scorer"));
  EXPECT_EQ(stage.OnRequest(*other), pipeline::StageResult::kContinue);
  // Each is still held to the limit, and the refusal names the principal, not a tenant.
  auto again = request_as(admin);
  EXPECT_EQ(stage.OnRequest(*again), pipeline::StageResult::kStop);
  EXPECT_EQ(again->response.status, 429);
  EXPECT_NE(again->response.body.find("for principal 'key:admin1' (it has no tenant)"),
            std::string::npos)
      << again->response.body;
  // A tenant that happens to be spelled like the principal's id counts apart from it.
  auto lookalike = std::make_shared<identity::Principal>();
  lookalike->id = "jwt:mallory";
  lookalike->tenant = "key:admin1";
  EXPECT_EQ(stage.OnRequest(*request_as(lookalike)), pipeline::StageResult::kContinue);
  // Tenants still share theirs.
  EXPECT_EQ(stage.OnRequest(*f.Request()), pipeline::StageResult::kContinue);
  EXPECT_EQ(stage.OnRequest(*f.Request()), pipeline::StageResult::kStop);
}

TEST(AdmitStageTest, ConcurrencySlotsAreHeldUntilTheResponse) {
  Fixture f("[[limit]]\nname = \"one-at-a-time\"\nper = \"key\"\nconcurrency = 1\n");
  LocalLimiter limiter({});
  RecordingSink audit;
  AdmitStage stage(limiter, nullptr, audit, nullptr);
  auto first = f.Request();
  EXPECT_EQ(stage.OnRequest(*first), pipeline::StageResult::kContinue);
  auto second = f.Request();
  EXPECT_EQ(stage.OnRequest(*second), pipeline::StageResult::kStop);
  EXPECT_EQ(second->response.status, 429);
  EXPECT_EQ(Header(*second, "Retry-After"), "1");
  stage.OnResponse(*first);
  auto third = f.Request();
  EXPECT_EQ(stage.OnRequest(*third), pipeline::StageResult::kContinue);
}

// Runs one request through a chain holding only `stage`, driving posted tasks inline the way
// the connection's executor would.
int RunAlone(std::unique_ptr<AdmitStage> stage, Fixture& f, int requests,
             pipeline::Exchange* last = nullptr) {
  std::vector<std::unique_ptr<pipeline::Stage>> stages;
  stages.push_back(std::move(stage));
  pipeline::Chain chain(std::move(stages), nullptr);
  int admitted = 0;
  for (int i = 0; i < requests; ++i) {
    auto ex = f.Request();
    absl::Mutex mu;
    std::vector<absl::AnyInvocable<void() &&>> posted;
    bool done = false;
    ex->post = [&](absl::AnyInvocable<void() &&> task) {
      absl::MutexLock lock(&mu);
      posted.push_back(std::move(task));
    };
    ex->on_complete = [&](pipeline::Exchange&) { done = true; };
    chain.Start(*ex);
    while (!done) {
      std::vector<absl::AnyInvocable<void() &&>> tasks;
      {
        absl::MutexLock lock(&mu);
        tasks.swap(posted);
      }
      for (auto& t : tasks) std::move(t)();
      if (!done) absl::SleepFor(absl::Milliseconds(1));
    }
    admitted += ex->response.status == 200;
    if (last != nullptr && i + 1 == requests) {
      last->response = ex->response;
      last->error = ex->error;
    }
  }
  return admitted;
}

TEST(AdmitStageTest, WithTheStoreDownItFailsClosedOrFallsBackAsConfigured) {
  Fixture f("[[limit]]\nname = \"q\"\nper = \"key\"\nquota = 10\nperiod = \"day\"\n");
  RedisLimiterOptions dead;
  dead.port = 1;  // nothing listens there
  dead.timeout = absl::Milliseconds(50);
  RedisLimiter redis(dead);
  RecordingSink audit;
  monitor::MetricsRegistry metrics;
  pipeline::Exchange closed_reply;
  EXPECT_EQ(
      RunAlone(std::make_unique<AdmitStage>(redis, nullptr, audit, &metrics), f, 3, &closed_reply),
      0);
  EXPECT_EQ(closed_reply.response.status, 503);
  EXPECT_NE(closed_reply.error.find("limit store"), std::string::npos);
  EXPECT_EQ(Header(closed_reply, "Retry-After"), "1");
  // Fail open: a local limiter at 1/3 of the quota decides, and says so in the metrics.
  LocalLimiter fallback({.divisor = 3});
  EXPECT_EQ(RunAlone(std::make_unique<AdmitStage>(redis, &fallback, audit, &metrics), f, 10), 3);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("pillar_limiter_unavailable_total{outcome=\"refused\"} 3"), std::string::npos)
      << text;
  EXPECT_NE(text.find("pillar_limiter_unavailable_total{outcome=\"local_fallback\"} 10"),
            std::string::npos);
}

}  // namespace
}  // namespace pillar::limits
