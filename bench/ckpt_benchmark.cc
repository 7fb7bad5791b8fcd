// Checkpoint throughput and training-loop stall (bench/run_ckpt.sh runs the peers beside it):
//
//   ckpt_benchmark save DIR GIB      writes GIB GiB of float32 tensors (64 of them) as one
//                                    checkpoint in DIR/step-00000001 (fsynced, renamed); prints
//                                    seconds
//   ckpt_benchmark load DIR          loads and verifies it; prints seconds
//   ckpt_benchmark stall DIR GIB     a memory-bound "training loop" of fixed work, run three
//                                    ways: without a checkpoint, with an asynchronous one
//                                    (CheckpointManager, a later save: its staging buffer is
//                                    warm) and with a synchronous one taken at its start; prints
//                                    the three wall times, the async Save()'s blocking time and
//                                    the synchronous save's
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/run_directory.h"

namespace {

using Clock = std::chrono::steady_clock;
using pillar::ckpt::DType;

constexpr int kTensors = 64;

std::vector<std::vector<float>> MakeState(double gib) {
  const size_t floats = size_t(gib * double(1ull << 30) / 4 / kTensors);
  std::vector<std::vector<float>> state(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    state[size_t(t)].resize(floats);
    for (size_t i = 0; i < floats; ++i) state[size_t(t)][i] = float(i % 1000) * 0.001f + float(t);
  }
  return state;
}

std::vector<pillar::ckpt::EntryView> Views(const std::vector<std::vector<float>>& state) {
  std::vector<pillar::ckpt::EntryView> views;
  for (size_t t = 0; t < state.size(); ++t) {
    views.push_back({"layer" + std::to_string(t) + ".weight", DType::kFloat32,
                     {int64_t(state[t].size())}, std::as_bytes(std::span(state[t]))});
  }
  return views;
}

pillar::ckpt::WriteOptions Options() {
  pillar::ckpt::WriteOptions o;
  o.shard_bytes = 256ull << 20;
  o.threads = 4;
  return o;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A memory-bound stand-in for training steps: passes over a 256 MiB buffer.
double Work(std::vector<float>& buffer, int passes) {
  double sum = 0;
  for (int p = 0; p < passes; ++p) {
    for (float& x : buffer) {
      x = x * 0.999f + 0.001f;
      sum += x;
    }
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s save|load|stall DIR [GIB]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const double gib = argc > 3 ? std::atof(argv[3]) : 1.0;
  pillar::ckpt::Env& env = *pillar::ckpt::Env::Default();
  pillar::ckpt::RunDirectory run(&env, dir);
  if (!run.Prepare().ok()) return 1;
  if (mode == "save") {
    const auto state = MakeState(gib);
    const auto start = Clock::now();
    auto m = pillar::ckpt::WriteCheckpoint(env, run.StepPath(1), 1, Views(state), {}, Options());
    if (!m.ok() || !run.PublishLatest(1).ok()) return 1;
    std::printf("%.4f\n", Seconds(start));
    return 0;
  }
  if (mode == "load") {
    const auto start = Clock::now();
    auto loaded = pillar::ckpt::LoadCheckpoint(env, run.StepPath(1), 4);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    std::printf("%.4f\n", Seconds(start));
    return 0;
  }
  if (mode == "stall") {
    const auto state = MakeState(gib);
    std::vector<float> buffer(64ull << 20, 1.0f);
    // Enough work to outlast a synchronous write of the state at this disk's speed.
    const int passes = std::max(40, int(gib * 60));
    volatile double sink = 0;
    auto start = Clock::now();
    sink = sink + Work(buffer, passes);
    const double base = Seconds(start);

    std::vector<pillar::ckpt::Source> sources;
    for (const auto& v : Views(state)) {
      sources.push_back(pillar::ckpt::HostSource(v.name, v.dtype, v.shape, v.data));
    }
    pillar::ckpt::CheckpointManager::Options options;
    options.fast_dir = dir + "/async";
    options.write = Options();
    options.write.threads = 1;  // in the background, leave the cores to training
    options.retention.keep_last = 1;
    auto manager = pillar::ckpt::CheckpointManager::Open(options);
    if (!manager.ok()) return 1;
    // A training run saves many times: the first save sizes (and faults in) the staging
    // buffer once; what is measured is a later one.
    if (!(*manager)->Save(1, sources).ok() || !(*manager)->Wait().ok()) return 1;
    start = Clock::now();
    if (!(*manager)->Save(2, sources).ok()) return 1;
    const double snapshot = Seconds(start);
    sink = sink + Work(buffer, passes);
    const double async_loop = Seconds(start);
    if (!(*manager)->Wait().ok()) return 1;

    start = Clock::now();
    if (!pillar::ckpt::WriteCheckpoint(env, dir + "/sync-step", 1, Views(state), {}, Options()).ok()) {
      return 1;
    }
    const double sync_save = Seconds(start);
    sink = sink + Work(buffer, passes);
    const double sync_loop = Seconds(start);
    std::printf("%.4f %.4f %.4f %.4f %.4f\n", base, async_loop, sync_loop, snapshot, sync_save);
    return 0;
  }
  return 2;
}
