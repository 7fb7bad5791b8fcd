// Checkpoints for a training loop, asynchronous and in two tiers (R-OPS-1, R-PERF-6, R-COST-5).
// Save() copies the state into a host staging buffer (reused from save to save) and returns:
// the training loop stalls only for that copy. With `pipelined_snapshot` even the copy leaves the
// loop's path (CheckFreq's design): it runs while the next step's forward and backward passes
// read the state, and the loop calls AwaitSnapshot() before its update changes it. A background
// thread writes the checkpoint to the fast tier (local NVMe) with the commit protocol, moves
// `latest`, applies retention; a second thread then drains it to the durable tier (a shared file
// system) the same way. LoadLatest() prefers the fast tier and falls back to the durable one.
//
//   CheckpointManager::Options options;
//   options.fast_dir = "/scratch/run-7";
//   options.durable_dir = "/lustre/ckpt/run-7";
//   PILLAR_ASSIGN_OR_RETURN(auto manager, CheckpointManager::Open(options));
//   for (int64_t step = start; step < steps; ++step) {
//     Train(step);
//     if (step % every == 0) PILLAR_RETURN_IF_ERROR(manager->Save(step, sources).status());
//   }
//
// Pipelined, the step splits at the update:
//
//   Forward(); Backward();        // reads the parameters: overlaps the snapshot's copy
//   manager->AwaitSnapshot();     // the stall: what is left of the copy, usually nothing
//   optimizer.Step();             // changes them
//   if (step % every == 0) PILLAR_RETURN_IF_ERROR(manager->Save(step, sources).status());
//   PILLAR_RETURN_IF_ERROR(manager->Wait());
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/run_directory.h"
#include "common/env.h"

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
    // Save() hands the sources over and returns at once; the copy runs in the background. The
    // caller keeps the sources alive and unchanged until AwaitSnapshot() returns: a change
    // before that lands in the checkpoint (which still verifies, so nothing would tell).
    bool pipelined_snapshot = false;
    WriteOptions write;
    Env* env = Env::Default();
  };

  // Prepares both tiers (removes what a crash mid-save left) and starts the threads.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CheckpointManager>> Open(Options options);
  // Waits for what is in flight.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Snapshots `sources` and returns once they are copied; true when a checkpoint was started,
  // false when skipped (busy, skip_when_busy). The error of an earlier background write, if
  // any, is returned here (once).
  [[nodiscard]] absl::StatusOr<bool> Save(int64_t step, std::span<const Source> sources,
                                          std::map<std::string, std::string> metadata = {});
  // Returns once the last Save()'s sources are copied and may change: at once unless a
  // pipelined snapshot is still copying.
  void AwaitSnapshot();
  // Waits until every checkpoint started is written to the fast tier and drained; the first
  // error since the last Wait().
  [[nodiscard]] absl::Status Wait();

  // The newest verified checkpoint, fast tier first; `notes` says what was skipped and why.
  [[nodiscard]] absl::StatusOr<LoadedCheckpoint> LoadLatest(std::vector<std::string>* notes) const;
  // Before the first Save(): sets aside (RunDirectory::SetAsideNewerThan) the fast tier's
  // checkpoints newer than `step`, the one training resumes from, which LoadLatest skipped as
  // broken: the run is about to write those steps again (review helper-121: a damaged newest
  // checkpoint failed every restart at its step, "exists"). Returns their new names.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> SetAsideNewerThan(int64_t step);

  // Measurements of the last completed checkpoint, for the interval recommendation.
  struct Costs {
    double snapshot_seconds = 0;  // the copy into the staging buffer
    // What the training loop waited for in Save() and AwaitSnapshot(): the copy itself, or
    // only the part of a pipelined copy that its forward and backward passes did not hide.
    double stall_seconds = 0;
    double write_seconds = 0;  // to the fast tier, in the background
    uint64_t bytes = 0;
  };
  Costs last_costs() const;

 private:
  explicit CheckpointManager(Options options);
  // Copies each source into its entry's bytes in the staging buffer, over snapshot_threads
  // threads for large checkpoints.
  void CopyIntoStaging(std::span<const Source> sources, std::span<const EntryView> entries) const;
  // Retention on one tier after `step` was written there; a set-aside copy that could not be
  // removed is said on stderr (once for each reason: it is tried again at every save), not an
  // error.
  [[nodiscard]] absl::Status PruneTier(RunDirectory& tier, int64_t step);
  void WriteLoop();
  void DrainLoop();

  const Options options_;
  RunDirectory fast_;
  std::optional<RunDirectory> durable_;

  // What PruneTier said could not be removed (from the writer's and the drainer's threads).
  absl::Mutex said_mu_;
  std::set<std::string> said_not_removed_ ABSL_GUARDED_BY(said_mu_);

  mutable absl::Mutex mu_;
  // The staging buffer and the checkpoint it holds, handed to the writer.
  std::unique_ptr<std::byte[]> staging_ ABSL_GUARDED_BY(mu_);
  uint64_t staging_capacity_ ABSL_GUARDED_BY(mu_) = 0;
  struct Pending {
    int64_t step = 0;
    std::vector<EntryView> entries;
    std::map<std::string, std::string> metadata;
    double snapshot_seconds = 0;
    std::vector<Source> sources;  // pipelined: still to be copied, by the writer
  };
  std::optional<Pending> pending_ ABSL_GUARDED_BY(mu_);  // set: the writer owns the buffer
  bool copying_ ABSL_GUARDED_BY(mu_) = false;            // a pipelined snapshot is not yet complete
  double stall_seconds_ ABSL_GUARDED_BY(mu_) = 0;        // of the last Save()
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
[[nodiscard]] absl::Status CopyCheckpoint(Env& env, const std::string& from, const std::string& to);

}  // namespace pillar::ckpt
