// Checkpoint throughput and training-loop stall (bench/run_ckpt.sh runs the peers beside it):
//
//   ckpt_benchmark save DIR GIB      writes GIB GiB of float32 tensors (64 of them) as one
//                                    checkpoint in DIR/step-00000001 (fsynced, renamed); prints
//                                    seconds
//   ckpt_benchmark load DIR          loads and verifies it; prints seconds
//   ckpt_benchmark stall DIR GIB [R] a memory-bound "training loop" of 4 steps (read phase,
//                                    then an update of the whole state), checkpointed after the
//                                    first step four ways: not at all, asynchronously
//                                    (CheckpointManager; a later save, its staging buffer warm),
//                                    pipelined (the copy overlaps the next read phase) and
//                                    synchronously; R rounds (default 3); prints the medians of
//                                    the four loop times and of the time the loop was blocked by
//                                    the async, pipelined and sync checkpoints (STALL_DEBUG=1:
//                                    each manager's costs on stderr)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
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
    views.push_back({"layer" + std::to_string(t) + ".weight",
                     DType::kFloat32,
                     {int64_t(state[t].size())},
                     std::as_bytes(std::span(state[t]))});
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

constexpr int kSteps = 4;

// A training step's forward and backward passes, memory-bound: they read the state (the
// parameters) once and pass over activations (256 MiB), 6 passes per GiB of state -- a short
// step for a model of that size, so the copy has little to hide behind.
void ReadPhase(const std::vector<std::vector<float>>& state, std::vector<float>& activations,
               double gib) {
  float sum = 0;
  for (const auto& tensor : state) {
    for (float x : tensor) sum += x;
  }
  const int passes = std::max(2, int(gib * 6));
  for (int p = 0; p < passes; ++p) {
    for (float& x : activations) x = x * 0.999f + sum * 1e-12f;
  }
}

// The optimizer's update: changes every byte of the state.
void Update(std::vector<std::vector<float>>& state) {
  for (auto& tensor : state) {
    for (float& x : tensor) x = x * 0.999f + 0.001f;
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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
  pillar::Env& env = *pillar::Env::Default();
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
    auto state = MakeState(gib);
    std::vector<float> activations(64ull << 20, 1.0f);
    const int rounds = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
    std::vector<pillar::ckpt::Source> sources;
    for (const auto& v : Views(state)) {
      sources.push_back(pillar::ckpt::HostSource(v.name, v.dtype, v.shape, v.data));
    }
    // Each variant runs kSteps steps and checkpoints after the first; the sync variant's
    // blocked time is its save, the others' what Save() and AwaitSnapshot() took.
    enum Variant { kNone, kAsync, kPipelined, kSync, kVariants };
    std::vector<double> loop[kVariants], blocked[kVariants];
    for (int round = 0; round < rounds; ++round) {
      for (int v = 0; v < kVariants; ++v) {
        std::unique_ptr<pillar::ckpt::CheckpointManager> manager;
        if (v == kAsync || v == kPipelined) {
          pillar::ckpt::CheckpointManager::Options options;
          options.fast_dir = dir + (v == kAsync ? "/async" : "/pipelined");
          std::filesystem::remove_all(options.fast_dir);
          options.write = Options();
          options.write.threads = 1;  // in the background, leave the cores to training
          options.retention.keep_last = 1;
          options.pipelined_snapshot = v == kPipelined;
          auto opened = pillar::ckpt::CheckpointManager::Open(options);
          if (!opened.ok()) return 1;
          manager = std::move(*opened);
          // A training run saves many times: the first save sizes (and faults in) the
          // staging buffer once; what is measured is a later one.
          if (!manager->Save(1, sources).ok() || !manager->Wait().ok()) return 1;
        }
        double stalled = 0;
        const auto start = Clock::now();
        for (int step = 0; step < kSteps; ++step) {
          ReadPhase(state, activations, gib);
          if (manager != nullptr) {
            const auto t = Clock::now();
            manager->AwaitSnapshot();
            stalled += Seconds(t);
          }
          Update(state);
          if (step != 0) continue;
          const auto t = Clock::now();
          if (manager != nullptr) {
            if (!manager->Save(2, sources).ok()) return 1;
          } else if (v == kSync) {
            auto m = pillar::ckpt::WriteCheckpoint(env, run.StepPath(10 + round), 2, Views(state),
                                                   {}, Options());
            if (!m.ok()) return 1;
          }
          stalled += Seconds(t);
        }
        loop[v].push_back(Seconds(start));
        blocked[v].push_back(stalled);
        if (manager != nullptr && !manager->Wait().ok()) return 1;
        if (manager != nullptr && std::getenv("STALL_DEBUG") != nullptr) {
          const auto c = manager->last_costs();
          std::fprintf(stderr, "variant %d copy %.4f stall %.4f write %.4f\n", v,
                       c.snapshot_seconds, c.stall_seconds, c.write_seconds);
        }
        std::filesystem::remove_all(run.StepPath(10 + round));
      }
    }
    std::printf("%.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", Median(loop[kNone]), Median(loop[kAsync]),
                Median(loop[kPipelined]), Median(loop[kSync]), Median(blocked[kAsync]),
                Median(blocked[kPipelined]), Median(blocked[kSync]));
    return 0;
  }
  return 2;
}
