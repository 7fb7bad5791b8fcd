#include "runtime/admission.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "runtime/batching_runner.h"

namespace pillar::runtime {
namespace {

using protocol::DataType;
using protocol::Tensor;

TEST(AdmissionTest, TheLowerClassGetsLessOfTheQueue) {
  EXPECT_EQ(QueueLimit(Priority::kHigh, 100), 100);
  EXPECT_EQ(QueueLimit(Priority::kNormal, 100), 90);
  EXPECT_EQ(QueueLimit(Priority::kLow, 100), 50);
  for (Priority p : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
    EXPECT_EQ(QueueLimit(p, 1), 1) << PriorityName(p);
    EXPECT_EQ(QueueLimit(p, 0), 0) << PriorityName(p);
  }
  EXPECT_EQ(ParsePriority("low"), Priority::kLow);
  EXPECT_EQ(ParsePriority("urgent"), std::nullopt);
}

TEST(AdmissionTest, AWaitPastTheDeadlineIsShedWithTheEstimateAsRetryAfter) {
  EXPECT_FALSE(MissesDeadline(500'000'000, 1'000, 0));  // no deadline: no estimate
  EXPECT_FALSE(MissesDeadline(500'000'000, 0, 600'000'000));
  EXPECT_TRUE(MissesDeadline(2'500'000'000, 0, 600'000'000));
  EXPECT_EQ(CeilSeconds(2'500'000'000), 3);
  EXPECT_EQ(CeilSeconds(1), 1);
  std::optional<absl::Status> shed = ShedForDeadline(2'500'000'000, CeilSeconds(2'500'000'000));
  ASSERT_TRUE(shed.has_value());
  EXPECT_TRUE(IsShed(*shed));
  EXPECT_TRUE(IsShedForDeadline(*shed));
  EXPECT_EQ(shed->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RetryAfterSeconds(*shed), 3);
  EXPECT_NE(shed->message().find("2500 ms"), absl::string_view::npos);
}

// Sleeps `ms` per batch, then echoes its input as "y". Counts the batches it has started, so a
// test can wait for one to be running rather than sleep and hope (CI's loaded hosts).
class SleepyBackend final : public Backend {
 public:
  explicit SleepyBackend(int ms) : ms_(ms) {}
  absl::StatusOr<std::vector<Tensor>> Execute(std::vector<Tensor>& inputs) override {
    {
      absl::MutexLock lock(&mu_);
      ++started_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return std::vector<Tensor>{Tensor{"y", DataType::kFp32, inputs[0].shape, inputs[0].data}};
  }
  void AwaitStarted(int n) {
    absl::MutexLock lock(&mu_);
    auto started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; };
    mu_.Await(absl::Condition(&started));
  }

 private:
  int ms_;
  absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
};

models::ModelConfig OneAtATime(int64_t queue) {
  models::ModelConfig c;
  c.max_batch_size = 1;
  c.inputs = {{"x", DataType::kFp32, {2}}};
  c.outputs = {{"y", DataType::kFp32, {2}}};
  c.batching.max_queue_delay_us = 0;
  c.batching.max_queue_size = queue;
  return c;
}

protocol::InferenceRequest Row(Priority priority = Priority::kNormal, int64_t deadline_ns = 0) {
  protocol::InferenceRequest r;
  r.inputs.push_back(Tensor{"x", DataType::kFp32, {1, 2}, std::string(8, '\0')});
  r.priority = priority;
  r.deadline_ns = deadline_ns;
  return r;
}

std::future<absl::StatusOr<InferResult>> Submit(Runner& runner, protocol::InferenceRequest r) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<InferResult>>>();
  auto future = promise->get_future();
  runner.Infer(std::move(r),
               [promise](absl::StatusOr<InferResult> res) { promise->set_value(std::move(res)); });
  return future;
}

TEST(AdmissionTest, ABatchingQueueShedsARequestItCannotServeBeforeItsDeadline) {
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<SleepyBackend>(100));
  BatchingRunner runner(OneAtATime(16), std::move(instances), SystemClock());
  ASSERT_TRUE(Submit(runner, Row()).get().ok());  // measures a batch: about 100 ms
  auto running = Submit(runner, Row());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // taken by the instance
  auto queued1 = Submit(runner, Row());
  auto queued2 = Submit(runner, Row());
  const int64_t now = SystemClock().MonotonicNanos();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<InferResult> hurried =
      Submit(runner, Row(Priority::kNormal, now + 150'000'000)).get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));  // at once
  ASSERT_FALSE(hurried.ok());
  EXPECT_TRUE(IsShed(hurried.status())) << hurried.status();
  EXPECT_GE(RetryAfterSeconds(hurried.status()).value_or(0), 1);
  // A deadline the queue can meet is kept.
  auto patient = Submit(runner, Row(Priority::kNormal, now + 10'000'000'000));
  EXPECT_TRUE(running.get().ok());
  EXPECT_TRUE(queued1.get().ok());
  EXPECT_TRUE(queued2.get().ok());
  EXPECT_TRUE(patient.get().ok());
}

TEST(AdmissionTest, UnderPressureTheLowerClassIsRefusedFirst) {
  auto backend = std::make_unique<SleepyBackend>(100);
  SleepyBackend* sleepy = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  BatchingRunner runner(OneAtATime(4), std::move(instances), SystemClock());
  auto running = Submit(runner, Row());
  sleepy->AwaitStarted(1);
  auto a = Submit(runner, Row());
  auto b = Submit(runner, Row());  // two queued: half of 4, all a low request may fill
  absl::StatusOr<InferResult> low = Submit(runner, Row(Priority::kLow)).get();
  ASSERT_FALSE(low.ok());
  EXPECT_TRUE(IsShed(low.status()));
  EXPECT_NE(low.status().message().find("low-priority"), absl::string_view::npos);
  auto normal = Submit(runner, Row(Priority::kNormal));
  auto high = Submit(runner, Row(Priority::kHigh));
  for (auto* f : {&running, &a, &b, &normal, &high}) EXPECT_TRUE(f->get().ok());
}

TEST(AdmissionTest, ARequestThatWouldRunAtOnceIsTakenWhateverTheEstimate) {
  // A slow spell measured (300 ms batches); then, with nothing ahead, a request with a 100 ms
  // deadline is still taken: only the requests ahead make a wait, and its run refreshes the
  // estimate.
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<SleepyBackend>(300));
  BatchingRunner runner(OneAtATime(16), std::move(instances), SystemClock());
  ASSERT_TRUE(Submit(runner, Row()).get().ok());
  const int64_t now = SystemClock().MonotonicNanos();
  absl::StatusOr<InferResult> r = Submit(runner, Row(Priority::kNormal, now + 100'000'000)).get();
  EXPECT_FALSE(IsShed(r.status())) << r.status();
}

TEST(AdmissionTest, AHigherClassQueuesAheadOfLowerOnesAndIsNotShedForThem) {
  auto backend = std::make_unique<SleepyBackend>(100);
  SleepyBackend* sleepy = backend.get();
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::move(backend));
  BatchingRunner runner(OneAtATime(16), std::move(instances), SystemClock());
  ASSERT_TRUE(Submit(runner, Row()).get().ok());  // measured: 100 ms a batch
  std::mutex mu;
  std::vector<std::string> order;
  auto submit = [&](Priority p, int64_t deadline_ns, std::string name) {
    auto done = std::make_shared<std::promise<absl::StatusOr<InferResult>>>();
    auto future = done->get_future();
    runner.Infer(Row(p, deadline_ns), [&, done, name](absl::StatusOr<InferResult> r) {
      {
        std::lock_guard lock(mu);
        order.push_back(name);
      }
      done->set_value(std::move(r));
    });
    return future;
  };
  auto running = submit(Priority::kLow, 0, "running");
  sleepy->AwaitStarted(2);
  auto low1 = submit(Priority::kLow, 0, "low1");
  auto low2 = submit(Priority::kLow, 0, "low2");
  // Two low ones wait (200 ms); a high one with 250 ms is not shed for them: it goes first.
  auto high = submit(Priority::kHigh, SystemClock().MonotonicNanos() + 250'000'000, "high");
  EXPECT_TRUE(high.get().ok());
  for (auto* f : {&running, &low1, &low2}) EXPECT_TRUE(f->get().ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"running", "high", "low1", "low2"}));
}

}  // namespace
}  // namespace pillar::runtime
