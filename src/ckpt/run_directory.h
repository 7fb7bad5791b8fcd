// One training run's checkpoints in one directory: `step-00001234/` per checkpoint, a `latest`
// pointer replaced atomically, stale `.tmp` directories (a crash mid-save) removed on Prepare().
// LoadLatest() starts from `latest` and walks back to older steps until one loads and verifies,
// saying why each newer one was skipped (R-OPS-1, R-OPS-2).
//
//   RunDirectory run(Env::Default(), "/scratch/run-7");
//   PILLAR_RETURN_IF_ERROR(run.Prepare());
//   std::vector<std::string> skipped;
//   absl::StatusOr<LoadedCheckpoint> c = run.LoadLatest(&skipped);   // NotFound: start fresh
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpoint_io.h"
#include "common/env.h"

namespace pillar::ckpt {

// "step-00001234" (at least eight digits).
std::string StepDirName(int64_t step);
// The step of a name StepDirName made; none for anything else (".tmp" directories included).
std::optional<int64_t> ParseStepDirName(std::string_view name);

// Which checkpoints to keep: the newest `keep_last`, and every one whose step is a multiple of
// `keep_every` (0: none of those). The one `latest` names is always kept.
struct Retention {
  int keep_last = 3;
  int64_t keep_every = 0;
};

class RunDirectory {
 public:
  RunDirectory(Env* env, std::string root) : env_(env), root_(std::move(root)) {}

  // Creates the directory and removes what a crash mid-save left (`*.tmp`).
  [[nodiscard]] absl::Status Prepare();
  // The steps with a complete-looking directory (not `.tmp`), ascending.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Steps() const;
  // What `latest` names; none when there is no pointer.
  [[nodiscard]] absl::StatusOr<std::optional<int64_t>> Latest() const;
  [[nodiscard]] absl::Status PublishLatest(int64_t step);
  // The newest checkpoint that loads and verifies; each newer one that does not is described
  // in `skipped` ("step-00001300: MANIFEST: checksum mismatch ..."). NotFound when none does.
  [[nodiscard]] absl::StatusOr<LoadedCheckpoint> LoadLatest(std::vector<std::string>* skipped,
                                                            int threads = 4) const;
  // Removes the checkpoints `retention` does not keep; returns the removed steps.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Prune(const Retention& retention);

  std::string StepPath(int64_t step) const { return root_ + "/" + StepDirName(step); }
  const std::string& root() const { return root_; }
  Env* env() const { return env_; }

 private:
  Env* env_;
  std::string root_;
};

}  // namespace pillar::ckpt
