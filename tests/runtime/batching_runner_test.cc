#include "runtime/batching_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "common/event_loop.h"
#include "monitor/metrics.h"
#include "testing/fake_clock.h"

namespace pillar::runtime {
namespace {

using protocol::DataType;
using protocol::Priority;
using protocol::Tensor;

// Doubles every FP32 element; records the batch sizes it saw, the thread of its last run and
// whether two runs ever overlapped. Can be held shut to fill queues, made slow, and allowed to
// run inline (BatchingRunner's lone requests).
class DoublingBackend final : public Backend {
 public:
  explicit DoublingBackend(bool may_inline = false) : may_inline_(may_inline) {}
  absl::StatusOr<std::vector<Tensor>> Execute(std::vector<Tensor>& inputs) override {
    if (++running_ > 1) overlapped_ = true;
    {
      std::unique_lock lock(mu_);
      threads_.push_back(std::this_thread::get_id());
      ++started_;
      started_cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      batches_.push_back(inputs[0].shape[0]);
    }
    if (slow_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (clock_ != nullptr) clock_->Advance(run_ns_);
    --running_;
    if (fail_) return absl::InternalError("backend failed");
    Tensor out{"y", DataType::kFp32, inputs[0].shape, inputs[0].data};
    float* v = reinterpret_cast<float*>(out.data.data());
    for (size_t i = 0; i < out.data.size() / 4; ++i) v[i] *= 2;
    return std::vector<Tensor>{std::move(out)};
  }
  bool MayRunInline() const override { return may_inline_; }
  void Hold() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void WaitStarted(int n) {
    std::unique_lock lock(mu_);
    started_cv_.wait(lock, [&] { return started_ >= n; });
  }
  int started() {
    std::lock_guard lock(mu_);
    return started_;
  }
  std::thread::id last_thread() {
    std::lock_guard lock(mu_);
    return threads_.back();
  }
  int RunsOn(std::thread::id thread) {
    std::lock_guard lock(mu_);
    return int(std::count(threads_.begin(), threads_.end(), thread));
  }
  std::vector<int64_t> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }
  std::atomic<bool> fail_{false};
  std::atomic<bool> slow_{false};
  std::atomic<bool> overlapped_{false};
  // Each run takes run_ns_ of this clock, when set.
  testing::FakeClock* clock_ = nullptr;
  int64_t run_ns_ = 0;

 private:
  const bool may_inline_;
  std::atomic<int> running_{0};
  std::mutex mu_;
  std::condition_variable cv_, started_cv_;
  bool open_ = true;
  int started_ = 0;
  std::vector<int64_t> batches_;
  std::vector<std::thread::id> threads_;
};

models::ModelConfig Config(int64_t max_batch, int64_t delay_us, int64_t queue) {
  models::ModelConfig c;
  c.platform = models::Platform::kTorchScript;
  c.max_batch_size = max_batch;
  c.inputs = {{"x", DataType::kFp32, {2}}};
  c.outputs = {{"y", DataType::kFp32, {2}}};
  c.batching.max_queue_delay_us = delay_us;
  c.batching.max_queue_size = queue;
  return c;
}

// A runner over one DoublingBackend, which the test keeps a pointer to.
struct OneInstance {
  explicit OneInstance(models::ModelConfig config, bool may_inline = false)
      : backend(new DoublingBackend(may_inline)),
        runner(std::move(config), Instances(backend), SystemClock()) {}
  static std::vector<std::unique_ptr<Backend>> Instances(DoublingBackend* backend) {
    std::vector<std::unique_ptr<Backend>> instances;
    instances.emplace_back(backend);
    return instances;
  }
  DoublingBackend* backend;  // owned by the runner
  BatchingRunner runner;
};

protocol::InferenceRequest Request(std::vector<float> values, int64_t rows) {
  protocol::InferenceRequest r;
  Tensor t{"x", DataType::kFp32, {rows, 2}, std::string(values.size() * 4, '\0')};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  r.inputs.push_back(std::move(t));
  return r;
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::future<absl::StatusOr<InferResult>> Submit(Runner& runner,
                                                protocol::InferenceRequest request) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<InferResult>>>();
  auto future = promise->get_future();
  runner.Infer(std::move(request),
               [promise](absl::StatusOr<InferResult> r) { promise->set_value(std::move(r)); });
  return future;
}

TEST(BatchingRunnerTest, RunsASingleRequest) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  BatchingRunner runner(Config(8, 0, 16), std::move(instances), SystemClock());
  absl::StatusOr<InferResult> r = Submit(runner, Request({1, 2}, 1)).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->outputs[0]), (std::vector<float>{2, 4}));
  EXPECT_EQ(r->outputs[0].shape, (std::vector<int64_t>{1, 2}));
}

TEST(BatchingRunnerTest, QueuedRequestsShareABatchAndGetTheirOwnRowsBack) {
  OneInstance one(Config(8, 0, 16));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  b->Hold();
  auto first = Submit(runner, Request({0, 0}, 1));  // occupies the instance
  b->WaitStarted(1);
  auto a = Submit(runner, Request({1, 2}, 1));
  auto c = Submit(runner, Request({3, 4, 5, 6}, 2));
  auto d = Submit(runner, Request({7, 8}, 1));
  b->Release();
  EXPECT_EQ(Floats(a.get()->outputs[0]), (std::vector<float>{2, 4}));
  absl::StatusOr<InferResult> rc = c.get();
  EXPECT_EQ(Floats(rc->outputs[0]), (std::vector<float>{6, 8, 10, 12}));
  EXPECT_EQ(rc->outputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(rc->batch_size, 4);
  EXPECT_EQ(Floats(d.get()->outputs[0]), (std::vector<float>{14, 16}));
  ASSERT_TRUE(first.get().ok());
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{1, 4}));
}

TEST(BatchingRunnerTest, BatchesNeverExceedTheMaximum) {
  OneInstance one(Config(3, 0, 64));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  b->Hold();
  auto first = Submit(runner, Request({0, 0}, 1));
  b->WaitStarted(1);
  std::vector<std::future<absl::StatusOr<InferResult>>> futures;
  for (int i = 0; i < 7; ++i) futures.push_back(Submit(runner, Request({float(i), 0}, 1)));
  b->Release();
  for (auto& f : futures) EXPECT_TRUE(f.get().ok());
  EXPECT_TRUE(first.get().ok());
  for (int64_t rows : b->batches()) EXPECT_LE(rows, 3);
}

TEST(BatchingRunnerTest, WaitsUpToTheQueueDelayForABatchToFill) {
  std::vector<std::unique_ptr<Backend>> instances;
  auto backend = std::make_unique<DoublingBackend>();
  DoublingBackend* b = backend.get();
  instances.push_back(std::move(backend));
  models::ModelConfig config = Config(2, 2'000'000, 16);
  config.batching.adaptive_delay = false;
  BatchingRunner runner(config, std::move(instances), SystemClock());
  auto start = std::chrono::steady_clock::now();
  auto a = Submit(runner, Request({1, 1}, 1));
  auto c = Submit(runner, Request({2, 2}, 1));  // completes the batch well before the 2 s delay
  ASSERT_TRUE(a.get().ok());
  ASSERT_TRUE(c.get().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{2}));
}

TEST(BatchingRunnerTest, FullQueueRefusesAtOnceWithARetryHint) {
  OneInstance one(Config(1, 0, 2));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  b->Hold();
  auto running = Submit(runner, Request({0, 0}, 1));
  b->WaitStarted(1);
  auto q1 = Submit(runner, Request({0, 0}, 1));
  auto q2 = Submit(runner, Request({0, 0}, 1));
  absl::StatusOr<InferResult> refused = Submit(runner, Request({0, 0}, 1)).get();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(RetryAfterSeconds(refused.status()).value_or(0), 1);
  b->Release();
  EXPECT_TRUE(running.get().ok());
  EXPECT_TRUE(q1.get().ok());
  EXPECT_TRUE(q2.get().ok());
}

// Under load that does not let up, a caller told to come back finds its place kept: it is taken
// although the queue is as full as when it was refused; a caller told nothing is not.
TEST(BatchingRunnerTest, ACallerBackAfterItsRetryAfterIsTakenThoughTheQueueIsFull) {
  auto backend = std::make_unique<DoublingBackend>();
  DoublingBackend* b = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  testing::FakeClock clock;
  BatchingRunner runner(Config(1, 0, 2), std::move(instances), clock);
  auto from = [](uint64_t caller) {
    protocol::InferenceRequest r = Request({1, 2}, 1);
    r.caller = caller;
    return r;
  };
  ASSERT_TRUE(Submit(runner, from(1)).get().ok());  // one batch measured
  b->Hold();
  auto running = Submit(runner, from(1));
  b->WaitStarted(2);
  auto q1 = Submit(runner, from(2));
  auto q2 = Submit(runner, from(3));
  absl::StatusOr<InferResult> refused = Submit(runner, from(42)).get();
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  const int64_t retry_s = RetryAfterSeconds(refused.status()).value_or(0);
  ASSERT_GE(retry_s, 1);
  clock.Advance(absl::Seconds(retry_s));
  auto back = Submit(runner, from(42));  // its place: taken
  absl::StatusOr<InferResult> stranger = Submit(runner, from(43)).get();
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kUnavailable);  // no place: refused
  b->Release();
  EXPECT_TRUE(back.get().ok());
  EXPECT_TRUE(running.get().ok());
  EXPECT_TRUE(q1.get().ok());
  EXPECT_TRUE(q2.get().ok());
}

// Found by the second attacker review: a promised request was served as high priority, so a key
// capped at low got ahead of everyone by being refused first. It keeps its class: at the front
// of its class, behind the higher ones.
TEST(BatchingRunnerTest, APromisedRequestKeepsItsClass) {
  auto backend = std::make_unique<DoublingBackend>();
  DoublingBackend* b = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  testing::FakeClock clock;
  BatchingRunner runner(Config(1, 0, 4), std::move(instances), clock);
  auto from = [](uint64_t caller, Priority priority) {
    protocol::InferenceRequest r = Request({1, 2}, 1);
    r.caller = caller;
    r.priority = priority;
    return r;
  };
  ASSERT_TRUE(Submit(runner, from(1, Priority::kNormal)).get().ok());  // one batch measured
  b->Hold();
  std::mutex mu;
  std::vector<uint64_t> order;
  auto submit = [&](uint64_t caller, Priority priority) {
    runner.Infer(from(caller, priority), [&, caller](absl::StatusOr<InferResult> r) {
      std::lock_guard lock(mu);
      order.push_back(r.ok() ? caller : 0);
    });
  };
  submit(1, Priority::kNormal);  // running
  b->WaitStarted(2);
  submit(2, Priority::kLow);  // low may fill half of the queue: 2 of 4
  submit(3, Priority::kLow);
  absl::StatusOr<InferResult> refused = Submit(runner, from(42, Priority::kLow)).get();
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  submit(4, Priority::kNormal);
  clock.Advance(absl::Seconds(RetryAfterSeconds(refused.status()).value_or(1)));
  submit(42, Priority::kLow);  // back: taken, at the front of the low ones, behind the normal one
  b->Release();
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(mu);
      if (order.size() == 5) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 4, 42, 2, 3}));
}

TEST(BatchingRunnerTest, BackendErrorsReachEveryRequestOfTheBatch) {
  auto backend = std::make_unique<DoublingBackend>();
  backend->fail_ = true;
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  BatchingRunner runner(Config(4, 0, 16), std::move(instances), SystemClock());
  absl::StatusOr<InferResult> r = Submit(runner, Request({1, 2}, 1)).get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
}

TEST(BatchingRunnerTest, InvalidRequestsAreRefusedBeforeQueueing) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  BatchingRunner runner(Config(4, 0, 16), std::move(instances), SystemClock());
  EXPECT_EQ(Submit(runner, Request({1, 2, 3}, 1)).get().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BatchingRunnerTest, DestructionFailsQueuedRequests) {
  auto backend = std::make_unique<DoublingBackend>();
  DoublingBackend* b = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  auto runner =
      std::make_unique<BatchingRunner>(Config(1, 0, 16), std::move(instances), SystemClock());
  b->Hold();
  auto running = Submit(*runner, Request({0, 0}, 1));
  b->WaitStarted(1);
  auto queued = Submit(*runner, Request({0, 0}, 1));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the destructor start
    b->Release();
  });
  runner.reset();
  release.join();
  EXPECT_TRUE(running.get().ok());
  EXPECT_EQ(queued.get().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pillar::runtime

namespace pillar::runtime {
namespace {

// The batch sizes' series a runner is given lives as long as the runner (its model version):
// every version ever loaded kept one (review helper-137).
TEST(BatchingRunnerTest, TheBatchSizeSeriesGoesWithTheRunner) {
  monitor::MetricsRegistry metrics;
  monitor::Family<monitor::Histogram>& sizes = metrics.AddHistogram(
      "pillar_batch_size", "Rows a batch.", {"model", "version"}, monitor::BatchSizeBuckets());
  {
    std::vector<std::unique_ptr<Backend>> instances;
    instances.push_back(std::make_unique<DoublingBackend>());
    BatchingRunner runner(Config(8, 0, 16), std::move(instances), SystemClock(),
                          sizes.Hold({"m", "3"}));
    ASSERT_TRUE(Submit(runner, Request({1, 1}, 1)).get().ok());
    EXPECT_NE(metrics.Render().find(R"(pillar_batch_size_count{model="m",version="3"} 1)"),
              std::string::npos)
        << metrics.Render();
  }
  EXPECT_EQ(metrics.Render().find(R"(version="3")"), std::string::npos) << metrics.Render();
}

TEST(BatchingRunnerTest, ALoneRequestDoesNotWaitForCompanyWhenAdaptive) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  BatchingRunner runner(Config(8, 2'000'000, 16), std::move(instances), SystemClock());
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Submit(runner, Request({1, 1}, 1)).get().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
}

TEST(BatchingRunnerTest, WithoutAdaptiveDelayALoneRequestWaitsTheFullDelay) {
  models::ModelConfig config = Config(8, 300'000, 16);
  config.batching.adaptive_delay = false;
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  BatchingRunner runner(config, std::move(instances), SystemClock());
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<InferResult> r = Submit(runner, Request({1, 1}, 1)).get();
  ASSERT_TRUE(r.ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_GE(r->queue_ns, 300'000'000);
}

// Runs requests one after another until the runner has measured enough batches to decide.
void Warm(BatchingRunner& runner) {
  for (int i = 0; i < BatchingRunner::kMeasuredBeforeInline; ++i) {
    ASSERT_TRUE(Submit(runner, Request({1, 1}, 1)).get().ok());
  }
}

// How many of `n` lone requests ran on this thread. An instance's thread counts itself idle a
// moment after it answered, so the first after a batch on it may still queue.
int InlineRuns(BatchingRunner& runner, DoublingBackend& backend, int n) {
  int runs = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(Submit(runner, Request({1, 1}, 1)).get().ok());
    runs += backend.last_thread() == std::this_thread::get_id();
  }
  return runs;
}

TEST(BatchingRunnerTest, ALoneRequestForAFastIdleModelRunsOnTheCallersThread) {
  OneInstance one(Config(8, 2'000, 16), /*may_inline=*/true);
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  Warm(runner);
  EXPECT_GE(InlineRuns(runner, *b, 20), 19);
  absl::StatusOr<InferResult> r = Submit(runner, Request({3, 4}, 1)).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Floats(r->outputs[0]), (std::vector<float>{6, 8}));
  EXPECT_EQ(b->last_thread(), std::this_thread::get_id());
}

TEST(BatchingRunnerTest, ABackendThatMayNotRunInlineAlwaysRunsOnItsOwnThread) {
  OneInstance one(Config(8, 2'000, 16));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  Warm(runner);
  EXPECT_EQ(InlineRuns(runner, *b, 20), 0);
}

TEST(BatchingRunnerTest, ASlowModelRunsOnItsOwnThread) {
  auto backend = std::make_unique<DoublingBackend>(/*may_inline=*/true);
  DoublingBackend* b = backend.get();
  b->slow_ = true;  // 1 ms a batch: over the inline budget
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  BatchingRunner runner(Config(8, 2'000, 16), std::move(instances), SystemClock());
  Warm(runner);
  EXPECT_EQ(InlineRuns(runner, *b, 20), 0);
}

TEST(BatchingRunnerTest, ALargeRequestRunsOnItsInstancesThreadNotInline) {
  // No batching and a free dimension: only the body limit bounds a request's size.
  models::ModelConfig config = Config(0, 2'000, 16);
  config.inputs = {{"x", DataType::kFp32, {-1}}};
  config.outputs = {{"y", DataType::kFp32, {-1}}};
  auto backend = std::make_unique<DoublingBackend>(/*may_inline=*/true);
  DoublingBackend* b = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  BatchingRunner runner(config, std::move(instances), SystemClock());
  auto request = [](int64_t floats) {
    protocol::InferenceRequest r;
    r.inputs.push_back(
        Tensor{"x", DataType::kFp32, {floats}, std::string(size_t(floats) * 4, '\0')});
    return r;
  };
  for (int i = 0; i < BatchingRunner::kMeasuredBeforeInline + 1; ++i) {
    ASSERT_TRUE(Submit(runner, request(2)).get().ok());
  }
  ASSERT_TRUE(Submit(runner, request(2)).get().ok());
  EXPECT_EQ(b->last_thread(), std::this_thread::get_id());  // small: inline
  // Over kInlineMaxBytes: on the instance's thread, however fast the small ones were.
  ASSERT_TRUE(Submit(runner, request(int64_t(BatchingRunner::kInlineMaxBytes / 4) + 1)).get().ok());
  EXPECT_NE(b->last_thread(), std::this_thread::get_id());
}

TEST(BatchingRunnerTest, ALoneRequestPastItsDeadlineIsNotRunInline) {
  OneInstance one(Config(8, 2'000, 16), /*may_inline=*/true);
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  Warm(runner);
  ASSERT_GE(InlineRuns(runner, *b, 20), 19);
  protocol::InferenceRequest late = Request({1, 2}, 1);
  late.deadline_ns = 1;  // long past
  const int executions = b->started();
  absl::StatusOr<InferResult> r = Submit(runner, std::move(late)).get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(b->started(), executions);  // computed for nobody: not at all
}

TEST(BatchingRunnerTest, AnInstanceRunningInlineIsNotUsedByItsThreadMeanwhile) {
  OneInstance one(Config(8, 2'000, 16), /*may_inline=*/true);
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  Warm(runner);
  ASSERT_GE(InlineRuns(runner, *b, 20), 19);  // the last one too: the runner is idle now
  b->Hold();
  // The lone request runs inline on this thread, held inside the backend.
  std::thread caller([&] { ASSERT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok()); });
  b->WaitStarted(BatchingRunner::kMeasuredBeforeInline + 21);
  // Meanwhile the model is busy: these queue, and the instance's own thread must wait for it.
  auto second = Submit(runner, Request({5, 6}, 1));
  auto third = Submit(runner, Request({7, 8}, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  b->Release();
  caller.join();
  absl::StatusOr<InferResult> r2 = second.get();
  absl::StatusOr<InferResult> r3 = third.get();
  ASSERT_TRUE(r2.ok() && r3.ok());
  EXPECT_EQ(Floats(r2->outputs[0]), (std::vector<float>{10, 12}));
  EXPECT_EQ(Floats(r3->outputs[0]), (std::vector<float>{14, 16}));
  EXPECT_FALSE(b->overlapped_.load()) << "the backend ran two batches at once";
}

// One instance that may run inline, on a fake clock, each batch taking 50 us of it.
struct TimedInstance {
  TimedInstance()
      : backend(new DoublingBackend(/*may_inline=*/true)),
        runner(Config(64, 2'000, 64), OneInstance::Instances(backend), clock) {
    backend->clock_ = &clock;
    backend->run_ns_ = 50'000;
  }
  // A lone request, `after` the last one: whether it ran on this thread (inline).
  bool Lone(absl::Duration after) {
    clock.Advance(after);
    EXPECT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok());
    return backend->last_thread() == std::this_thread::get_id();
  }
  testing::FakeClock clock;  // before the runner, which keeps a reference
  DoublingBackend* backend;  // owned by the runner
  BatchingRunner runner;
};

// At 64 connections to the demo's model, three batches in four were lone inline runs, each
// paying the model's whole fixed cost while the next requests waited behind it. While requests
// arrive faster than a batch runs, a lone one for an idle model queues for the instance's thread
// instead; once they come slower again, lone requests run inline again.
TEST(BatchingRunnerTest, RequestsArrivingFasterThanABatchRunsAreNotRunInline) {
  TimedInstance one;
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  testing::FakeClock& clock = one.clock;
  auto lone = [&](absl::Duration after) { return one.Lone(after); };
  for (int i = 0; i < BatchingRunner::kMeasuredBeforeInline; ++i) lone(absl::Milliseconds(1));
  int inline_runs = 0;
  for (int i = 0; i < 10; ++i) inline_runs += lone(absl::Milliseconds(1));
  ASSERT_GE(inline_runs, 9);  // a millisecond apart: lone runs inline
  // A burst 5 us apart while a run holds the model: they queue (the model is busy).
  b->Hold();
  std::thread caller([&] { EXPECT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok()); });
  b->WaitStarted(BatchingRunner::kMeasuredBeforeInline + 11);
  std::vector<std::future<absl::StatusOr<InferResult>>> burst;
  for (int i = 0; i < 30; ++i) {
    clock.Advance(absl::Microseconds(5));
    burst.push_back(Submit(runner, Request({1, 2}, 1)));
  }
  b->Release();
  caller.join();
  for (auto& f : burst) EXPECT_TRUE(f.get().ok());
  // The model is idle, but requests have been coming every few microseconds, faster than its
  // 50 us runs: the next one goes to the instance's thread.
  EXPECT_FALSE(lone(absl::Microseconds(5)));
  // A millisecond apart again: inline again within a few arrivals.
  inline_runs = 0;
  for (int i = 0; i < 20; ++i) inline_runs += i >= 10 && lone(absl::Milliseconds(1));
  EXPECT_GE(inline_runs, 9);
}

// Review helper-118: the inline budget is a mean, so a request small enough to run inline but
// slow to compute held its loop, and a rare one moved the mean for about ten batches only: a
// model slow once in a few dozen requests ran most of its slow ones on a loop. After one such
// run, inline runs stop for twenty times its length, by the clock, however many requests come
// meanwhile (review helper-119: a stop counted in batches, 413 for a 50 ms run, was walked
// through by cheap requests).
TEST(BatchingRunnerTest, OneSlowSmallRunStopsInlineRunsForTwentyTimesItsLength) {
  TimedInstance one;
  DoublingBackend* b = one.backend;
  auto inline_runs = [&](int n) {
    int runs = 0;
    for (int i = 0; i < n; ++i) runs += one.Lone(absl::Milliseconds(1));
    return runs;
  };
  inline_runs(BatchingRunner::kMeasuredBeforeInline);
  ASSERT_GE(inline_runs(10), 9);
  b->run_ns_ = 50'000'000;                       // 50 ms, once
  ASSERT_TRUE(one.Lone(absl::Milliseconds(1)));  // it ran on this thread
  b->run_ns_ = 50'000;
  // 1 s stopped: 900 requests, 1.05 ms of the clock each (the mean alone was back under the
  // budget after about 30).
  EXPECT_EQ(inline_runs(900), 0);
  one.clock.Advance(absl::Milliseconds(60));
  EXPECT_GE(inline_runs(20), 19);  // then inline again
  // A run just under the mark changes nothing.
  b->run_ns_ = BatchingRunner::kInlineOverrunNs - 1'000;
  ASSERT_TRUE(one.Lone(absl::Milliseconds(1)));
  b->run_ns_ = 50'000;
  inline_runs(12);  // the mean's own wait (0.8 ms moved it over the budget)
  EXPECT_GE(inline_runs(20), 19);
}

// Review helper-119: judged by its size against the cost per byte as it ended, a slow inline run
// went unnoticed when another instance's batches had moved that cost while it ran.
TEST(BatchingRunnerTest, ASlowInlineRunStopsInlineRunsWhateverTheOtherInstanceDid) {
  testing::FakeClock clock;
  auto* slow = new DoublingBackend(/*may_inline=*/true);
  auto* other = new DoublingBackend(/*may_inline=*/true);
  for (DoublingBackend* b : {slow, other}) {
    b->clock_ = &clock;
    b->run_ns_ = 50'000;
  }
  std::vector<std::unique_ptr<Backend>> instances;
  instances.emplace_back(slow);
  instances.emplace_back(other);
  // No wait for company: it would be timed by the fake clock, which stands still meanwhile.
  BatchingRunner runner(Config(64, 0, 64), std::move(instances), clock);
  const std::thread::id here = std::this_thread::get_id();
  const std::vector<float> large(64, 1);  // 32 rows, 256 bytes
  auto lone = [&](bool small = true) {
    const int before = slow->RunsOn(here) + other->RunsOn(here);
    clock.Advance(absl::Milliseconds(1));
    EXPECT_TRUE(Submit(runner, small ? Request({1, 2}, 1) : Request(large, 32)).get().ok());
    return slow->RunsOn(here) + other->RunsOn(here) > before;
  };
  // 256-byte batches of 50 us: the inline budget takes up to 1 KiB.
  for (int i = 0; i < BatchingRunner::kMeasuredBeforeInline + 4; ++i) lone(false);
  ASSERT_TRUE(lone(false));
  // 256 bytes, inline on the first instance, held there; 5 ms of the clock once let go.
  slow->Hold();
  slow->run_ns_ = 5'000'000;
  const int started = slow->started();
  std::thread::id caller_id;
  std::thread caller([&] {
    caller_id = std::this_thread::get_id();
    EXPECT_TRUE(Submit(runner, Request(large, 32)).get().ok());
  });
  slow->WaitStarted(started + 1);
  // Meanwhile the other instance's 8-byte batches of 50 us each take the cost per byte past
  // what a 256-byte input may have inline.
  for (int i = 0; i < 20; ++i) lone();
  slow->Release();
  caller.join();
  ASSERT_EQ(slow->last_thread(), caller_id);  // it ran inline
  slow->run_ns_ = 50'000;
  // 100 ms stopped: 40 requests 1.05 ms apart (the mean alone is back under the budget after
  // about 12).
  int inline_runs = 0;
  for (int i = 0; i < 40; ++i) inline_runs += lone();
  EXPECT_EQ(inline_runs, 0);
}

TEST(BatchingRunnerTest, DestructionWaitsForAnInlineRun) {
  auto backend = std::make_unique<DoublingBackend>(/*may_inline=*/true);
  DoublingBackend* b = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  auto runner =
      std::make_unique<BatchingRunner>(Config(8, 2'000, 16), std::move(instances), SystemClock());
  Warm(*runner);
  ASSERT_GE(InlineRuns(*runner, *b, 20), 19);
  b->Hold();
  std::atomic<bool> answered{false};
  std::thread caller([&] {
    runner->Infer(Request({1, 2}, 1), [&](absl::StatusOr<InferResult> r) {
      EXPECT_TRUE(r.ok());
      answered = true;
    });
  });
  b->WaitStarted(BatchingRunner::kMeasuredBeforeInline + 21);
  std::thread destroyer([&] { runner.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(answered.load());
  b->Release();
  destroyer.join();
  caller.join();
  EXPECT_TRUE(answered.load());
}

// What a turn of an event loop queues: `n` requests from one handler of `loop`, then the loop run
// until each is answered. Returns the answers' batch sizes and the threads the backend ran on.
std::vector<absl::StatusOr<InferResult>> OneTurn(boost::asio::io_context& loop, Runner& runner,
                                                 int n) {
  std::vector<absl::StatusOr<InferResult>> answers;
  boost::asio::post(loop, [&] {
    for (int i = 0; i < n; ++i) {
      runner.Infer(Request({float(i), 1}, 1), [&](absl::StatusOr<InferResult> r) {
        // Answered on the instance's thread or on the loop's: back to the loop, as a session does.
        boost::asio::post(
            loop, [&answers, r = std::move(r)]() mutable { answers.push_back(std::move(r)); });
      });
    }
  });
  ScopedEventLoop running(loop);
  loop.restart();
  // Kept running while the instance's thread computes: answers come back to it by post.
  auto work = boost::asio::make_work_guard(loop);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (int(answers.size()) < n && std::chrono::steady_clock::now() < give_up) {
    loop.run_one_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(int(answers.size()), n);
  return answers;
}

// One request off a loop, answered, and a moment for the instance's thread to wait for the next:
// a thread just started might otherwise find a whole turn queued however it is woken.
void RunOneAndLetItWait(BatchingRunner& runner) {
  ASSERT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// At 64 connections to the demo's model an instance woken at each arrival took the first
// request alone and the rest after its run: 2.5 rows a batch. Requests queued in one turn of a
// loop go as one batch, called at the turn's end.
TEST(BatchingRunnerTest, TheRequestsOfOneTurnOfALoopGoAsOneBatch) {
  OneInstance one(Config(8, 2'000, 64));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  RunOneAndLetItWait(runner);
  boost::asio::io_context loop;
  std::vector<absl::StatusOr<InferResult>> answers = OneTurn(loop, runner, 6);
  for (const absl::StatusOr<InferResult>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->batch_size, 6);
  }
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{1, 6}));
  // Past max_batch_size: full batches, then the rest.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  answers = OneTurn(loop, runner, 19);
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{1, 6, 8, 8, 3}));
  for (const absl::StatusOr<InferResult>& r : answers) ASSERT_TRUE(r.ok()) << r.status();
  // Off a loop, each arrival wakes the instance at once, as before.
  EXPECT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok());
  EXPECT_EQ(b->batches().back(), 1);
}

// Each loop's requests are called at the end of its own turn: a loop whose turn has not ended
// (here: not run again) does not hold back another loop's requests, whose call takes what both
// queued.
TEST(BatchingRunnerTest, ALoopsTurnDoesNotWaitForAnothersToEnd) {
  OneInstance one(Config(8, 2'000, 64));
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  RunOneAndLetItWait(runner);
  boost::asio::io_context first, second;
  std::atomic<int> first_answers{0};
  boost::asio::post(first, [&] {
    for (int i = 0; i < 2; ++i) {
      runner.Infer(Request({1, 2}, 1), [&](absl::StatusOr<InferResult> r) {
        EXPECT_TRUE(r.ok()) << r.status();
        ++first_answers;
      });
    }
  });
  {
    ScopedEventLoop running(first);
    ASSERT_EQ(first.run_one(), 1u);  // queues two; the call at its turn's end is left queued
  }
  EXPECT_EQ(OneTurn(second, runner, 3).size(), 3u);
  EXPECT_EQ(first_answers.load(), 2);
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{1, 5}));
  ScopedEventLoop running(first);
  first.run();  // its call finds nothing queued
  EXPECT_EQ(b->batches(), (std::vector<int64_t>{1, 5}));
}

// A fast model whose instance is idle runs a turn's batch on the loop's thread: no hand-off to
// the instance's thread and back. What does not fit the inline budget goes to the instance.
// On a fake clock: on the machine's, a loaded run's slower batches moved the inline budget's
// bytes, and the turn went in two batches (review helper-120, once in 160 runs beside two
// fuzzers).
TEST(BatchingRunnerTest, AFastIdleModelRunsATurnsBatchOnTheLoop) {
  TimedInstance one;
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  b->run_ns_ = 1'000;  // 125 ns a byte: the budget's 200 us take 1,600 bytes, the turn 40
  for (int i = 0; i < BatchingRunner::kMeasuredBeforeInline; ++i) one.Lone(absl::Milliseconds(1));
  boost::asio::io_context loop;
  std::vector<absl::StatusOr<InferResult>> answers = OneTurn(loop, runner, 5);
  EXPECT_EQ(b->batches().back(), 5);
  EXPECT_EQ(b->last_thread(), std::this_thread::get_id());  // the loop's
  std::vector<float> got;
  for (const absl::StatusOr<InferResult>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    got.push_back(Floats(r->outputs[0])[0]);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<float>{0, 2, 4, 6, 8}));
  // A slow model's batches go to its instance's thread.
  b->run_ns_ = 1'000'000;
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(Submit(runner, Request({1, 2}, 1)).get().ok());
  OneTurn(loop, runner, 3);
  EXPECT_NE(b->last_thread(), std::this_thread::get_id());
}

// The call posted to the loop may run after the runner is gone: it finds nothing to do, and
// what was queued was failed by the destructor.
TEST(BatchingRunnerTest, ACallPostedToALoopOutlivesItsRunner) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  auto runner =
      std::make_unique<BatchingRunner>(Config(8, 2'000, 64), std::move(instances), SystemClock());
  boost::asio::io_context loop;
  std::optional<absl::Status> answered;
  boost::asio::post(loop, [&] {
    runner->Infer(Request({1, 2}, 1),
                  [&](absl::StatusOr<InferResult> r) { answered = r.status(); });
    runner.reset();  // before the turn ends
  });
  ScopedEventLoop running(loop);
  loop.run();  // the posted call runs, and finds the runner gone
  ASSERT_TRUE(answered.has_value());
  EXPECT_EQ(answered->code(), absl::StatusCode::kUnavailable) << *answered;
}

// Review helper-118: the requests of one turn waited in the queue for its end, so a turn of more
// requests than a class's share of the queue had an idle model shed some. Past half the queue (or
// a full batch) they are called at once.
TEST(BatchingRunnerTest, ATurnLongerThanTheQueueIsNotShedByAnIdleModel) {
  OneInstance one(Config(64, 2'000, 8), /*may_inline=*/true);
  DoublingBackend* b = one.backend;
  BatchingRunner& runner = one.runner;
  Warm(runner);
  boost::asio::io_context loop;
  std::vector<absl::StatusOr<InferResult>> answers = OneTurn(loop, runner, 20);
  for (const absl::StatusOr<InferResult>& r : answers) EXPECT_TRUE(r.ok()) << r.status();
  // Called each time the queue held half its size: four at a time.
  const std::vector<int64_t> batches = b->batches();
  EXPECT_EQ(std::vector<int64_t>(batches.end() - 5, batches.end()),
            (std::vector<int64_t>{4, 4, 4, 4, 4}));
}

// Review helper-118: a call posted to a loop that is destroyed before running it left the loop
// marked as posted to, and the requests it was for unrun. Destroyed unrun, it takes the mark off
// and wakes the instances.
TEST(BatchingRunnerTest, ACallDestroyedUnrunWakesTheInstancesAndLeavesNoMark) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<DoublingBackend>());
  BatchingRunner runner(Config(8, 2'000, 64), std::move(instances), SystemClock());
  RunOneAndLetItWait(runner);
  std::promise<absl::StatusOr<InferResult>> answered;
  {
    auto loop = std::make_unique<boost::asio::io_context>();
    boost::asio::post(*loop, [&] {
      runner.Infer(Request({1, 2}, 1),
                   [&](absl::StatusOr<InferResult> r) { answered.set_value(std::move(r)); });
    });
    ScopedEventLoop running(*loop);
    ASSERT_EQ(loop->run_one(), 1u);  // queued; its call is left in the loop, then destroyed
  }
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(future.get().ok());
  // Any loop, at whatever address, posts its own call again.
  for (int i = 0; i < 3; ++i) {
    boost::asio::io_context loop;
    EXPECT_EQ(OneTurn(loop, runner, 2).size(), 2u);
  }
}

}  // namespace
}  // namespace pillar::runtime
