#include "runtime/simulated_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "runtime/batching_runner.h"
#include "runtime/runner.h"

namespace pillar::runtime {
namespace {

using models::LatencyDistribution;
using models::ModelConfig;
using protocol::DataType;
using protocol::Tensor;

ModelConfig Config(int64_t max_batch_size = 0) {
  ModelConfig c;
  c.platform = models::Platform::kSimulated;
  c.max_batch_size = max_batch_size;
  c.inputs = {{"x", DataType::kFp32, {4}}};
  c.outputs = {{"scores", DataType::kFp32, {10}}, {"label", DataType::kInt64, {-1}}};
  c.simulated.latency_ms = 0;
  return c;
}

std::vector<Tensor> Inputs(int64_t rows) {
  Tensor x{"x", DataType::kFp32, {rows, 4}, std::string(size_t(rows) * 16, '\0')};
  return {x};
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

TEST(SimulatedBackendTest, AnswersZerosOfTheDeclaredShapesWithTheBatchRows) {
  SimulatedBackend backend(Config(8), std::nullopt, 0);
  std::vector<Tensor> in = Inputs(3);
  absl::StatusOr<std::vector<Tensor>> out = backend.Execute(in);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, "scores");
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{3, 10}));
  EXPECT_EQ((*out)[0].data, std::string(3 * 10 * 4, '\0'));
  EXPECT_EQ((*out)[1].datatype, DataType::kInt64);
  EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{3, 1}));  // a free dimension: 1
  EXPECT_EQ((*out)[1].data.size(), 3u * 8);
}

TEST(SimulatedBackendTest, WaitsTheFixedLatency) {
  ModelConfig c = Config();
  c.simulated.latency_ms = 60;
  SimulatedBackend backend(c, std::nullopt, 0);
  std::vector<Tensor> in = Inputs(1);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend.Execute(in).ok());
  EXPECT_GE(Seconds(std::chrono::steady_clock::now() - start), 0.060);
}

TEST(SimulatedBackendTest, DistributionsHaveTheirConfiguredCentres) {
  ModelConfig normal = Config();
  normal.simulated.latency = LatencyDistribution::kNormal;
  normal.simulated.latency_ms = 50;
  normal.simulated.latency_stddev_ms = 10;
  ModelConfig lognormal = Config();
  lognormal.simulated.latency = LatencyDistribution::kLogNormal;
  lognormal.simulated.latency_ms = 20;
  lognormal.simulated.latency_sigma = 1;
  SimulatedBackend n(normal, std::nullopt, 0), l(lognormal, std::nullopt, 0);
  constexpr int kDraws = 20'001;
  std::vector<double> nd, ld;
  for (int i = 0; i < kDraws; ++i) {
    nd.push_back(n.DrawLatencyMillis());
    ld.push_back(l.DrawLatencyMillis());
  }
  double mean = 0;
  for (double v : nd) mean += v / kDraws;
  double var = 0;
  for (double v : nd) var += (v - mean) * (v - mean) / kDraws;
  EXPECT_NEAR(mean, 50, 0.5);
  EXPECT_NEAR(std::sqrt(var), 10, 0.5);
  std::nth_element(ld.begin(), ld.begin() + kDraws / 2, ld.end());
  EXPECT_NEAR(ld[kDraws / 2], 20, 1);  // the median of a log-normal is exp(mu)
  EXPECT_GE(*std::min_element(ld.begin(), ld.end()), 0);
}

TEST(SimulatedBackendTest, ANegativeNormalDrawIsClampedToZero) {
  ModelConfig c = Config();
  c.simulated.latency = LatencyDistribution::kNormal;
  c.simulated.latency_ms = 0;
  c.simulated.latency_stddev_ms = 100;
  SimulatedBackend backend(c, std::nullopt, 0);
  for (int i = 0; i < 1000; ++i) ASSERT_GE(backend.DrawLatencyMillis(), 0);
}

TEST(SimulatedBackendTest, OutcomesFollowTheirRates) {
  ModelConfig c = Config();
  c.simulated.error_rate = 0.2;
  c.simulated.throttle_rate = 0.3;
  c.simulated.retry_after_s = 7;
  SimulatedBackend backend(c, std::nullopt, 0);
  int ok = 0, errors = 0, throttled = 0;
  constexpr int kRuns = 10'000;
  for (int i = 0; i < kRuns; ++i) {
    std::vector<Tensor> in = Inputs(1);
    absl::StatusOr<std::vector<Tensor>> out = backend.Execute(in);
    if (out.ok()) {
      ++ok;
    } else if (absl::IsResourceExhausted(out.status())) {
      ++throttled;
      ASSERT_EQ(RetryAfterSeconds(out.status()), 7);
    } else {
      ASSERT_TRUE(absl::IsInternal(out.status())) << out.status();
      ++errors;
    }
  }
  EXPECT_NEAR(double(ok) / kRuns, 0.5, 0.03);
  EXPECT_NEAR(double(errors) / kRuns, 0.2, 0.03);
  EXPECT_NEAR(double(throttled) / kRuns, 0.3, 0.03);
}

TEST(SimulatedBackendTest, TheSameSeedReplaysAndInstancesDiffer) {
  ModelConfig c = Config();
  c.simulated.latency = LatencyDistribution::kLogNormal;
  c.simulated.latency_ms = 10;
  c.simulated.seed = 99;
  SimulatedBackend a(c, std::nullopt, 0), b(c, std::nullopt, 0), other(c, std::nullopt, 1);
  std::vector<double> da, db, dother;
  for (int i = 0; i < 100; ++i) {
    da.push_back(a.DrawLatencyMillis());
    db.push_back(b.DrawLatencyMillis());
    dother.push_back(other.DrawLatencyMillis());
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dother);
  c.simulated.seed = 100;
  SimulatedBackend reseeded(c, std::nullopt, 0);
  EXPECT_NE(reseeded.DrawLatencyMillis(), da[0]);
}

TEST(SimulatedBackendTest, AHangEndsInDeadlineExceededOrAtInterrupt) {
  ModelConfig c = Config();
  c.simulated.hang_rate = 1;
  c.simulated.hang_ms = 50;
  {
    SimulatedBackend backend(c, std::nullopt, 0);
    std::vector<Tensor> in = Inputs(1);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<Tensor>> out = backend.Execute(in);
    EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
    EXPECT_GE(Seconds(std::chrono::steady_clock::now() - start), 0.050);
  }
  c.simulated.hang_ms = 600'000;
  SimulatedBackend backend(c, std::nullopt, 0);
  std::thread unloader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    backend.Interrupt();
  });
  std::vector<Tensor> in = Inputs(1);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<Tensor>> out = backend.Execute(in);
  unloader.join();
  EXPECT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start), 5.0);
}

// A server unloading a version whose simulated upstream hangs does not wait out the hang.
TEST(SimulatedBackendTest, UnloadingARunnerInterruptsAHangingInstance) {
  ModelConfig c = Config();
  c.simulated.hang_rate = 1;
  c.simulated.hang_ms = 600'000;
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<SimulatedBackend>(c, std::nullopt, 0));
  absl::Notification answered;
  absl::Status status;
  auto runner = std::make_unique<BatchingRunner>(c, std::move(instances), SystemClock());
  protocol::InferenceRequest request;
  request.inputs = {{"x", DataType::kFp32, {4}, std::string(16, '\0')}};
  runner->Infer(std::move(request), [&](absl::StatusOr<InferResult> r) {
    status = r.status();
    answered.Notify();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the instance is waiting now
  const auto start = std::chrono::steady_clock::now();
  runner.reset();
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start), 5.0);
  ASSERT_TRUE(answered.HasBeenNotified());
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

// A request whose caller stopped waiting while it queued is answered, not computed.
TEST(SimulatedBackendTest, ARequestPastItsDeadlineIsNotRun) {
  ModelConfig c = Config();
  c.simulated.latency_ms = 500;
  std::vector<std::unique_ptr<Backend>> instances;
  instances.push_back(std::make_unique<SimulatedBackend>(c, std::nullopt, 0));
  BatchingRunner runner(c, std::move(instances), SystemClock());
  absl::Notification first_done, second_done;
  absl::Status first, second;
  protocol::InferenceRequest a, b;
  a.inputs = b.inputs = {{"x", DataType::kFp32, {4}, std::string(16, '\0')}};
  b.deadline_ns = SystemClock().MonotonicNanos() + 50'000'000;  // gone before the instance frees
  const auto start = std::chrono::steady_clock::now();
  runner.Infer(std::move(a), [&](absl::StatusOr<InferResult> r) {
    first = r.status();
    first_done.Notify();
  });
  runner.Infer(std::move(b), [&](absl::StatusOr<InferResult> r) {
    second = r.status();
    second_done.Notify();
  });
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_TRUE(absl::IsDeadlineExceeded(second)) << second;
  // Answered when the instance looked at it after the first (0.5 s), not after running it too
  // (1 s).
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start), 0.9);
}

TEST(SimulatedBackendTest, EmpiricalDrawsComeFromTheHistogram) {
  ModelConfig c = Config();
  c.simulated.latency = LatencyDistribution::kEmpirical;
  absl::StatusOr<LatencyHistogram> h = LatencyHistogram::Parse("2 0\n3 1\n", "h.txt");
  ASSERT_TRUE(h.ok());
  SimulatedBackend backend(c, *h, 0);
  for (int i = 0; i < 1000; ++i) {
    const double ms = backend.DrawLatencyMillis();
    ASSERT_GE(ms, 2);
    ASSERT_LE(ms, 3);
  }
}

}  // namespace
}  // namespace pillar::runtime
