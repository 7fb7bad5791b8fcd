// One training run's checkpoints in one directory: `step-00001234/` per checkpoint, a `latest`
// pointer replaced atomically, stale `.tmp` directories (a crash mid-save) removed on Prepare().
// LoadLatest() starts from `latest` and walks back to older steps until one loads and verifies,
// saying why each newer one was skipped (R-OPS-1, R-OPS-2). Whatever changes the run (Prepare,
// Prune, SetAsideNewerThan) first takes the run's lock, so that two processes never write one
// run: a second trainer, or a restore or import into a live run, is refused at once. One thread
// at a time uses an object.
//
//   RunDirectory run(Env::Default(), "/scratch/run-7");
//   PILLAR_RETURN_IF_ERROR(run.Prepare());
//   std::vector<std::string> skipped;
//   absl::StatusOr<LoadedCheckpoint> c = run.LoadLatest(&skipped);   // NotFound: start fresh
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpoint_io.h"
#include "common/env.h"

namespace pillar::ckpt {

// "step-00001234" (at least eight digits).
std::string StepDirName(int64_t step);
// The step of a name StepDirName made; none for anything else (".tmp" directories included).
std::optional<int64_t> ParseStepDirName(std::string_view name);

// DataLoss when `dir` is named for a step (StepDirName) and `manifest` says another one: a
// directory copied or renamed over another step's (review helper-121). Every reader by step
// name checks it: RunDirectory::Load and Verify, and `pillar ckpt verify`, `show`, `export`.
[[nodiscard]] absl::Status CheckStepName(const std::string& dir, const Manifest& manifest);

// Whether `status`, from reading a checkpoint, says the checkpoint itself is wrong (a checksum,
// a size, a missing file, a manifest of another step) rather than that reading it failed
// (permissions, an I/O error, no descriptors left), which no one should take for damage.
bool IsCheckpointDamage(const absl::Status& status);

// Which checkpoints to keep: the newest `keep_last`, and every one whose step is a multiple of
// `keep_every` (0: none of those). The one `latest` names is always kept. Of the checkpoints a
// trainer set aside (`.broken-*`), the newest `keep_set_aside` by the time in their names are
// kept for inspection: without a bound, a step damaged again at every restart (a failing disk)
// left a whole copy each time until the disk was full.
struct Retention {
  int keep_last = 3;
  int64_t keep_every = 0;
  int keep_set_aside = 2;
};

// What Prune removed: checkpoints by step, set-aside copies by name; and why a set-aside copy it
// would have removed is still there (removing those is best effort: a copy that cannot be
// removed, an I/O error on the failing disk that damaged it, must not stop a trainer's saves).
struct Pruned {
  std::vector<int64_t> steps;
  std::vector<std::string> set_aside;
  std::vector<std::string> not_removed;
};

// A set-aside checkpoint's directory name, `step-00001236.broken-<unix s>[-<n>]`.
struct SetAsideName {
  int64_t step = 0;
  int64_t unix_seconds = 0;
  int64_t n = 0;  // 0 for the first of its second, then 1, 2, ...
};
std::optional<SetAsideName> ParseSetAsideName(std::string_view name);

class RunDirectory {
 public:
  RunDirectory(Env* env, std::string root) : env_(env), root_(std::move(root)) {}

  // Takes the run's lock (`<run>/.lock`) unless this object holds it; FailedPrecondition naming
  // the run when another process (or another RunDirectory) holds it. Kept until destruction.
  [[nodiscard]] absl::Status Lock();
  // Creates the directory, takes the lock, and removes what a crash mid-save left: the `.tmp`
  // directories of steps and the `latest` pointer's temporary files, and nothing else (a run
  // directory given by mistake, `~` say, loses nothing of its own).
  [[nodiscard]] absl::Status Prepare();
  // The steps with a complete-looking directory (not `.tmp`), ascending.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Steps() const;
  // What `latest` names; none when there is no pointer.
  [[nodiscard]] absl::StatusOr<std::optional<int64_t>> Latest() const;
  [[nodiscard]] absl::Status PublishLatest(int64_t step);
  // Step `step`, loaded and verified, its manifest saying that step (a directory renamed or
  // copied over another step's is refused: DataLoss).
  [[nodiscard]] absl::StatusOr<LoadedCheckpoint> Load(int64_t step, int threads = 4) const;
  // Step `step` verified by reading it (Load's checks, without keeping it mapped).
  [[nodiscard]] absl::Status Verify(int64_t step, int threads = 4) const;
  // The newest checkpoint that loads and verifies; each newer one that is damaged is described
  // in `skipped` ("step-00001300: MANIFEST: checksum mismatch ..."). NotFound when none does;
  // a newer one that cannot be read for another reason stops the walk with that error (review
  // helper-123: a durable tier unreadable to the trainer was skipped, and its progress redone).
  [[nodiscard]] absl::StatusOr<LoadedCheckpoint> LoadLatest(std::vector<std::string>* skipped,
                                                            int threads = 4) const;
  // Under the lock: renames each step directory newer than `step` (every one for -1) to
  // `<name>.broken-<unix seconds>`, which no reader takes for a checkpoint (Prune keeps the newest
  // Retention::keep_set_aside of them).
  // For a trainer resuming from `step` after LoadLatest skipped every newer one: it writes those
  // steps again, and what did not load stays for inspection. Returns the new names.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> SetAsideNewerThan(int64_t step);
  // Under the lock: sets step `step` aside the same way; returns its new name.
  [[nodiscard]] absl::StatusOr<std::string> SetAside(int64_t step);
  // Under the lock: removes the checkpoints and set-aside copies `retention` does not keep.
  // `keep_last` counts checkpoints that verify (at least one is kept), read from the newest down
  // until that many are found (`known_good`, a step the caller has just written, and steps this
  // object verified before are not read again): damaged ones above the newest good one are left
  // as they are, damaged ones below it go, and damage never makes room by removing good ones.
  // Every `keep_every`-th step and the one `latest` names are kept too. FailedPrecondition,
  // removing nothing, when none verifies. From the command line this reads up to `keep_last`
  // whole checkpoints. Set-aside copies are judged by name only (they are never read).
  [[nodiscard]] absl::StatusOr<Pruned> Prune(const Retention& retention,
                                             std::optional<int64_t> known_good = std::nullopt);

  std::string StepPath(int64_t step) const { return root_ + "/" + StepDirName(step); }
  const std::string& root() const { return root_; }
  Env* env() const { return env_; }

 private:
  // Removes all but the newest `keep` set-aside copies, adding their names to `pruned.set_aside`
  // and why one could not be removed to `pruned.not_removed`; an error only when the directory
  // cannot be listed.
  [[nodiscard]] absl::Status PruneSetAside(int keep, Pruned& pruned);

  Env* env_;
  std::string root_;
  std::unique_ptr<FileLock> lock_;
  // Steps this object found whole (Load, Verify) or was told were (Prune's `known_good`), so that
  // retention reads each at most once; a set-aside step is forgotten.
  mutable std::set<int64_t> verified_;
  // Steps LoadLatest skipped as damaged, so that SetAsideNewerThan need not read them again.
  mutable std::set<int64_t> damaged_;
};

}  // namespace pillar::ckpt
