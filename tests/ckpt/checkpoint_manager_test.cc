// The asynchronous, two-tier manager: a save returns after the copy, the fast tier is written
// and drained to the durable one, restore prefers the fast tier and falls back, retention runs
// on both, a busy manager waits or skips, and a background failure surfaces on the next call.
#include "ckpt/checkpoint_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "ckpt/interval.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace pillar::ckpt {
namespace {

namespace fs = std::filesystem;
using ::pillar::testing::FaultEnv;

std::vector<float> Weights(int step) {
  std::vector<float> w(50000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(step) + float(i) * 1e-3f;
  return w;
}

std::vector<Source> Sources(const std::vector<float>& w) {
  return {HostSource("w", DType::kFloat32, {int64_t(w.size())}, std::as_bytes(std::span(w)))};
}

bool Holds(const LoadedCheckpoint& c, int step) {
  const std::vector<float> w = Weights(step);
  std::span<const std::byte> got = c.Data("w");
  return c.manifest().step == step && got.size() == w.size() * sizeof(float) &&
         std::memcmp(got.data(), w.data(), got.size()) == 0;
}

TEST(CheckpointManagerTest, SavesAreWrittenDrainedAndRestoredFromTheFastTierFirst) {
  testing::TempDir dir;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.durable_dir = (dir.path() / "durable").string();
  options.retention = {.keep_last = 2, .keep_every = 0};
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status();
  for (int step = 1; step <= 5; ++step) {
    std::vector<float> w = Weights(step);
    auto saved = (*manager)->Save(step, Sources(w), {{"step", std::to_string(step)}});
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_TRUE(*saved);
    // `w` may go away now: the manager holds its own copy.
  }
  ASSERT_TRUE((*manager)->Wait().ok());
  EXPECT_EQ((*manager)->last_costs().bytes, 200000u);  // 50,000 floats in one shard
  std::vector<std::string> notes;
  auto latest = (*manager)->LoadLatest(&notes);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(Holds(*latest, 5));
  RunDirectory fast(Env::Default(), options.fast_dir), durable(Env::Default(), options.durable_dir);
  EXPECT_EQ(*fast.Steps(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(durable.Steps()->back(), 5);
  EXPECT_LE(durable.Steps()->size(), 2u);
  // This machine's scratch is lost: restore comes from the durable tier.
  manager->reset();
  fs::remove_all(options.fast_dir);
  auto reopened = CheckpointManager::Open(options);
  ASSERT_TRUE(reopened.ok());
  auto restored = (*reopened)->LoadLatest(&notes);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_TRUE(Holds(*restored, 5));
}

// Found by review helper-121: draining took a durable step directory that was already there
// without reading it, so an empty one (or an earlier run's damaged one) became the durable tier's
// latest. One that does not verify is set aside and the step copied again.
TEST(CheckpointManagerTest, DrainingReplacesADurableStepThatDoesNotVerify) {
  testing::TempDir dir;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.durable_dir = (dir.path() / "durable").string();
  fs::create_directories(dir.path() / "durable" / "step-00000001");
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status();
  std::vector<float> w = Weights(1);
  ASSERT_TRUE((*manager)->Save(1, Sources(w), {}).ok());
  ASSERT_TRUE((*manager)->Wait().ok());
  RunDirectory durable(Env::Default(), options.durable_dir);
  auto loaded = durable.Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(Holds(*loaded, 1));
  int aside = 0;
  for (const auto& e : fs::directory_iterator(options.durable_dir)) {
    aside += e.path().filename().string().starts_with("step-00000001.broken-");
  }
  EXPECT_EQ(aside, 1);
}

TEST(CheckpointManagerTest, ABusyManagerSkipsWhenToldTo) {
  testing::TempDir dir;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.skip_when_busy = true;
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok());
  std::vector<float> w = Weights(1);
  int started = 0, skipped = 0;
  for (int step = 1; step <= 50; ++step) {
    auto saved = (*manager)->Save(step, Sources(w));
    ASSERT_TRUE(saved.ok());
    (*saved ? started : skipped)++;
  }
  ASSERT_TRUE((*manager)->Wait().ok());
  EXPECT_GT(started, 0);
  EXPECT_GT(skipped, 0);  // fifty saves back to back cannot all fit behind one fsync each
}

TEST(CheckpointManagerTest, ABackgroundFailureSurfacesAndTheLastGoodCheckpointRemains) {
  testing::TempDir dir;
  FaultEnv env;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.env = &env;
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok());
  std::vector<float> one = Weights(1), two = Weights(2);
  ASSERT_TRUE((*manager)->Save(1, Sources(one)).ok());
  ASSERT_TRUE((*manager)->Wait().ok());
  env.FailAt(env.ops() + 3, FaultEnv::Fault::kNoSpace);
  ASSERT_TRUE((*manager)->Save(2, Sources(two)).ok());
  absl::Status waited = (*manager)->Wait();
  EXPECT_EQ(waited.code(), absl::StatusCode::kResourceExhausted) << waited;
  EXPECT_NE(waited.message().find("checkpoint at step 2"), std::string::npos) << waited;
  std::vector<std::string> notes;
  auto latest = (*manager)->LoadLatest(&notes);
  ASSERT_TRUE(latest.ok());
  EXPECT_TRUE(Holds(*latest, 1));
}

TEST(CheckpointManagerTest, ASetAsideCopyThatCannotBeRemovedIsSaidOnce) {
  // Retention tries it again at every save; it was said at every save.
  testing::TempDir dir;
  FaultEnv env;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.env = &env;
  options.retention = {.keep_last = 1, .keep_set_aside = 0};
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok());
  std::filesystem::create_directories(dir.path() / "fast" / "step-00000009.broken-1000");
  env.FailRemovalsOf(".broken-");
  std::vector<float> w = Weights(1);
  ::testing::internal::CaptureStderr();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*manager)->Save(step, Sources(w)).ok());
    ASSERT_TRUE((*manager)->Wait().ok());
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  size_t said = 0;
  for (size_t at = 0;
       (at = err.find("checkpoint retention: step-00000009.broken-1000", at)) != std::string::npos;
       ++at) {
    ++said;
  }
  EXPECT_EQ(said, 1u) << err;
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "fast" / "step-00000009.broken-1000"));
}

TEST(CheckpointManagerTest, APipelinedSnapshotCopiesAfterSaveReturnsAndBeforeAwaitSnapshotDoes) {
  testing::TempDir dir;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.pipelined_snapshot = true;
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok());
  std::vector<float> w = Weights(3);
  // The copy waits for a go-ahead, so Save() can only return if it does not copy itself.
  absl::Notification go;
  std::atomic<bool> copied{false};
  std::vector<Source> sources = Sources(w);
  auto memcpy_source = std::move(sources[0].copy);
  sources[0].copy = [&](std::span<std::byte> out) {
    go.WaitForNotification();
    memcpy_source(out);
    copied = true;
  };
  auto saved = (*manager)->Save(3, sources);
  ASSERT_TRUE(saved.ok() && *saved);
  EXPECT_FALSE(copied);
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(50));
    go.Notify();
  });
  (*manager)->AwaitSnapshot();
  EXPECT_TRUE(copied);
  // The state may change now: the checkpoint keeps what it held at Save().
  std::fill(w.begin(), w.end(), -1.0f);
  ASSERT_TRUE((*manager)->Wait().ok());
  release.join();
  std::vector<std::string> notes;
  auto latest = (*manager)->LoadLatest(&notes);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(Holds(*latest, 3));
  const CheckpointManager::Costs costs = (*manager)->last_costs();
  EXPECT_GE(costs.stall_seconds, 0.03);  // AwaitSnapshot() waited for the go-ahead
  EXPECT_GE(costs.snapshot_seconds, costs.stall_seconds * 0.5);
  // Nothing in flight: returns at once.
  (*manager)->AwaitSnapshot();
}

TEST(CheckpointManagerTest, PipelinedSavesInARowEachHoldTheirStep) {
  testing::TempDir dir;
  CheckpointManager::Options options;
  options.fast_dir = (dir.path() / "fast").string();
  options.pipelined_snapshot = true;
  options.retention.keep_last = 10;
  auto manager = CheckpointManager::Open(options);
  ASSERT_TRUE(manager.ok());
  std::vector<float> w;
  for (int step = 1; step <= 5; ++step) {
    (*manager)->AwaitSnapshot();
    w = Weights(step);  // the "update"
    ASSERT_TRUE((*manager)->Save(step, Sources(w)).ok());
  }
  ASSERT_TRUE((*manager)->Wait().ok());
  RunDirectory run(Env::Default(), options.fast_dir);
  for (int step = 1; step <= 5; ++step) {
    auto loaded = LoadCheckpoint(*Env::Default(), run.StepPath(step), 1);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(Holds(*loaded, step)) << step;
  }
}

TEST(IntervalTest, YoungAndDalyAgreeWhenTheCostIsSmallAndDalyBoundsLargeCosts) {
  EXPECT_NEAR(YoungInterval(10, 86400), 1314.5, 0.1);
  // Daly: sqrt(2CM) [1 + sqrt(C/2M)/3 + C/(18M)] - C, with sqrt(2CM) = 1314.534.
  EXPECT_NEAR(DalyInterval(10, 86400), 1307.876, 0.001);
  EXPECT_EQ(DalyInterval(1000, 100), 100);
  // At the optimum the overhead is lower than at half or double the interval.
  const double t = YoungInterval(10, 86400);
  EXPECT_LT(ExpectedOverhead(t, 10, 86400), ExpectedOverhead(t / 2, 10, 86400));
  EXPECT_LT(ExpectedOverhead(t, 10, 86400), ExpectedOverhead(t * 2, 10, 86400));
}

}  // namespace
}  // namespace pillar::ckpt
