#include "pipeline/chain.h"

#include <gtest/gtest.h>

#include <deque>

#include "testing/fake_clock.h"

namespace pillar::pipeline {
namespace {

// Records the order of calls; can stop or suspend.
class Recorder final : public Stage {
 public:
  Recorder(std::string name, std::vector<std::string>& log,
           StageResult result = StageResult::kContinue)
      : name_(std::move(name)), log_(log), result_(result) {}
  std::string_view name() const override { return name_; }
  StageResult OnRequest(Exchange& ex) override {
    log_.push_back(name_ + ".request");
    if (result_ == StageResult::kStop) ex.Fail(absl::PermissionDeniedError("no"));
    return result_;
  }
  void OnResponse(Exchange&) override { log_.push_back(name_ + ".response"); }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  StageResult result_;
};

struct Harness {
  Exchange ex;
  bool done = false;
  std::deque<absl::AnyInvocable<void() &&>> posted;
  Harness() {
    ex.post = [this](absl::AnyInvocable<void() &&> task) { posted.push_back(std::move(task)); };
    ex.on_complete = [this](Exchange&) { done = true; };
  }
};

TEST(ChainTest, RunsRequestHalvesInOrderAndResponseHalvesInReverse) {
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<Recorder>("a", log));
  stages.push_back(std::make_unique<Recorder>("b", log));
  Chain chain(std::move(stages), nullptr);
  Harness run;
  chain.Start(run.ex);
  EXPECT_TRUE(run.done);
  EXPECT_EQ(log, (std::vector<std::string>{"a.request", "b.request", "b.response", "a.response"}));
}

TEST(ChainTest, AStopEndsTheChainAndOnlyEnteredStagesSeeTheResponse) {
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<Recorder>("a", log));
  stages.push_back(std::make_unique<Recorder>("b", log, StageResult::kStop));
  stages.push_back(std::make_unique<Recorder>("c", log));
  Chain chain(std::move(stages), nullptr);
  Harness run;
  chain.Start(run.ex);
  EXPECT_TRUE(run.done);
  EXPECT_EQ(run.ex.response.status, 403);
  EXPECT_EQ(run.ex.response.body, R"({"error":"no"})");
  EXPECT_EQ(log, (std::vector<std::string>{"a.request", "b.request", "b.response", "a.response"}));
}

class Suspender final : public Stage {
 public:
  std::string_view name() const override { return "suspend"; }
  StageResult OnRequest(Exchange& ex) override {
    ex.post([&ex] { ex.chain().Resume(ex, StageResult::kContinue); });
    return StageResult::kSuspend;
  }
};

TEST(ChainTest, ASuspendedStageResumesWhereItLeftOff) {
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<Recorder>("a", log));
  stages.push_back(std::make_unique<Suspender>());
  stages.push_back(std::make_unique<Recorder>("c", log));
  monitor::MetricsRegistry metrics;
  Chain chain(std::move(stages), &metrics);
  Harness run;
  chain.Start(run.ex);
  EXPECT_FALSE(run.done);
  ASSERT_EQ(run.posted.size(), 1u);
  std::move(run.posted.front())();
  EXPECT_TRUE(run.done);
  EXPECT_EQ(log, (std::vector<std::string>{"a.request", "c.request", "c.response", "a.response"}));
  EXPECT_NE(metrics.Render().find("pillar_stage_duration_seconds_count{stage=\"suspend\"} 1"),
            std::string::npos);
}

// Spends `request_ns` and `response_ns` of a fake clock in its halves.
class Spender final : public Stage {
 public:
  Spender(std::string name, testing::FakeClock& clock, int64_t request_ns, int64_t response_ns,
          bool timed, std::vector<std::string>& log)
      : name_(std::move(name)),
        clock_(clock),
        request_ns_(request_ns),
        response_ns_(response_ns),
        timed_(timed),
        log_(log) {}
  std::string_view name() const override { return name_; }
  StageResult OnRequest(Exchange&) override {
    clock_.Advance(request_ns_);
    return StageResult::kContinue;
  }
  void OnResponse(Exchange&) override {
    clock_.Advance(response_ns_);
    log_.push_back(name_ + ".response");
  }
  bool TimesResponse() const override { return timed_; }

 private:
  std::string name_;
  testing::FakeClock& clock_;
  int64_t request_ns_, response_ns_;
  bool timed_;
  std::vector<std::string>& log_;
};

// The clock is read after the OnResponse of the stages that time theirs only; the others' still
// run, and their time counts to the next timed stage's.
TEST(ChainTest, OnlyStagesThatTimeTheirResponseHalfCostAClockReading) {
  testing::FakeClock clock;
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<Spender>("timed", clock, 10, 100, true, log));
  stages.push_back(std::make_unique<Spender>("untimed", clock, 20, 1000, false, log));
  stages.push_back(std::make_unique<Spender>("last", clock, 30, 10000, true, log));
  Chain chain(std::move(stages), nullptr, clock);
  Harness run;
  chain.Start(run.ex);
  ASSERT_TRUE(run.done);
  EXPECT_EQ(log, (std::vector<std::string>{"last.response", "untimed.response", "timed.response"}));
  EXPECT_EQ(run.ex.stage_ns[2], 30 + 10000);
  EXPECT_EQ(run.ex.stage_ns[1], 20);
  EXPECT_EQ(run.ex.stage_ns[0], 10 + 1000 + 100);
}

TEST(ExchangeTest, FailMapsStatusCodesAndAddsHeaders) {
  Exchange ex;
  ex.Fail(absl::UnauthenticatedError("who"));
  EXPECT_EQ(ex.response.status, 401);
  EXPECT_EQ(ex.response.headers[0].first, "WWW-Authenticate");
  Exchange busy;
  busy.Fail(runtime::UnavailableWithRetry("busy", 3));
  EXPECT_EQ(busy.response.status, 503);
  EXPECT_EQ(busy.response.headers[0], (std::pair<std::string, std::string>{"Retry-After", "3"}));
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
}

}  // namespace
}  // namespace pillar::pipeline
