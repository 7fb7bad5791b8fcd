// The marks a deployment keeps in its state store so that what a writer of the model store puts
// back cannot undo what holders of a key did (docs/formats/model_store.md):
//   - each model's highest aliases.json generation: a server refuses an older file (an earlier
//     signed one put back) or its removal, and the CLI numbers the next move above it;
//   - each model's highest version number seen signed for its own place: push never gives a
//     number twice, so a signature kept from a removed version never becomes valid again.
//
//   HighWaterMarks marks(state_store);
//   trust.admit_generation = [&](std::string_view m, int64_t g) { return marks.Admit(m, g); };
//   PILLAR_RETURN_IF_ERROR(marks.NoteVersion("digits", 3));
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "state/state_store.h"

namespace pillar::models {

class HighWaterMarks {
 public:
  explicit HighWaterMarks(state::StateStore& store) : store_(store) {}

  // OK when `generation` is at least the highest seen for `model`'s aliases, which it then
  // becomes.
  [[nodiscard]] absl::Status Admit(std::string_view model, int64_t generation);
  // The highest aliases generation seen for `model` (0: none).
  [[nodiscard]] absl::StatusOr<int64_t> Highest(std::string_view model);

  // Raises `model`'s version mark to `version` (a version that verified for its own place).
  [[nodiscard]] absl::Status NoteVersion(std::string_view model, int64_t version);
  // The highest version number `model` has had (0: none).
  [[nodiscard]] absl::StatusOr<int64_t> HighestVersion(std::string_view model);

 private:
  // Raises the mark `name` to `value` in the store unless the cache shows it is there already;
  // returns the mark.
  [[nodiscard]] absl::StatusOr<int64_t> Raise(const std::string& name, int64_t value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  state::StateStore& store_;
  absl::Mutex mu_;
  // What the store last confirmed: a scan every second asks about every model, and only a
  // value above this needs a write.
  std::map<std::string, int64_t, std::less<>> confirmed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar::models
