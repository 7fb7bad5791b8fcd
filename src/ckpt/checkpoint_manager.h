// Checkpoints for a training loop, asynchronous and in two tiers (R-OPS-1, R-PERF-6, R-COST-5).
// Save() copies the state into a host staging buffer (reused from save to save) and returns:
// the training loop stalls only for that copy. A background thread writes the checkpoint to the
// fast tier (local NVMe) with the commit protocol, moves `latest`, applies retention; a second
// thread then drains it to the durable tier (a shared file system) the same way. LoadLatest()
// prefers the fast tier and falls back to the durable one.
//
//   CheckpointManager::Options options;
//   options.fast_dir = "/scratch/run-7";
//   options.durable_dir = "/lustre/ckpt/run-7";
//   PILLAR_ASSIGN_OR_RETURN(auto manager, CheckpointManager::Open(options));
//   for (int64_t step = start; step < steps; ++step) {
//     Train(step);
//     if (step % every == 0) PILLAR_RETURN_IF_ERROR(manager->Save(step, sources).status());
//   }
//   PILLAR_RETURN_IF_ERROR(manager->Wait());
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/env.h"
#include "ckpt/run_directory.h"

namespace pillar::ckpt {

// One entry of a checkpoint to be, whose bytes `copy` writes into the staging buffer: a memcpy
// for host memory, a device-to-host copy for an accelerator's tensor.
struct Source {
  std::string name;
  DType dtype = DType::kBlob;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  std::function<void(std::span<std::byte> out)> copy;
};
// A Source for bytes already in host memory (valid until Save() returns).
Source HostSource(std::string name, DType dtype, std::vector<int64_t> shape,
                  std::span<const std::byte> data);

class CheckpointManager {
 public:
  struct Options {
    std::string fast_dir;     // required
    std::string durable_dir;  // empty: one tier
    Retention retention;      // applied to both tiers
    // A Save() while the previous one is still being written: wait for it (the default), or
    // skip this one and return false.
    bool skip_when_busy = false;
    // Threads that copy the sources into the staging buffer (for checkpoints of 64 MiB or
    // more): the training loop's stall is this copy.
    int snapshot_threads = int(std::thread::hardware_concurrency());
    WriteOptions write;
    Env* env = Env::Default();
  };

  // Prepares both tiers (removes what a crash mid-save left) and starts the threads.
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Open(Options options);
  // Waits for what is in flight.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Snapshots `sources` and returns once they are copied; true when a checkpoint was started,
  // false when skipped (busy, skip_when_busy). The error of an earlier background write, if
  // any, is returned here (once).
  absl::StatusOr<bool> Save(int64_t step, std::span<const Source> sources,
                            std::map<std::string, std::string> metadata = {});
  // Waits until every checkpoint started is written to the fast tier and drained; the first
  // error since the last Wait().
  absl::Status Wait();

  // The newest verified checkpoint, fast tier first; `notes` says what was skipped and why.
  absl::StatusOr<LoadedCheckpoint> LoadLatest(std::vector<std::string>* notes) const;

  // Measurements of the last completed checkpoint, for the interval recommendation.
  struct Costs {
    double snapshot_seconds = 0;  // the training loop's stall
    double write_seconds = 0;     // to the fast tier, in the background
    uint64_t bytes = 0;
  };
  Costs last_costs() const;

 private:
  explicit CheckpointManager(Options options);
  void WriteLoop();
  void DrainLoop();

  const Options options_;
  RunDirectory fast_;
  std::optional<RunDirectory> durable_;

  mutable absl::Mutex mu_;
  // The staging buffer and the checkpoint it holds, handed to the writer.
  std::unique_ptr<std::byte[]> staging_ ABSL_GUARDED_BY(mu_);
  uint64_t staging_capacity_ ABSL_GUARDED_BY(mu_) = 0;
  struct Pending {
    int64_t step = 0;
    std::vector<EntryView> entries;
    std::map<std::string, std::string> metadata;
    double snapshot_seconds = 0;
  };
  std::optional<Pending> pending_ ABSL_GUARDED_BY(mu_);  // set: the writer owns the buffer
  std::optional<int64_t> to_drain_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  Costs costs_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
  std::thread drainer_;
};

// Copies a complete checkpoint directory with the commit protocol (for draining a tier, and
// `pillar ckpt restore`), then verifies the copy.
absl::Status CopyCheckpoint(Env& env, const std::string& from, const std::string& to);

}  // namespace pillar::ckpt
