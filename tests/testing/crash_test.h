// The crash-at-every-step test every durable on-disk format gets, after the checkpoint
// library's: a writer replaces a file (or a set of them) that holds an old state with a new one;
// each of its file-system steps fails in turn, with each kind of fault, then the process
// "crashes" (FaultEnv::Crash drops what was not durable) and a reader looks. It must find the
// old state or the new one, whole, never a torn or missing one; and a write that reported
// success must have left the new one.
//
//   ExpectOldOrNewAfterACrashAtEveryStep({
//       .prepare = [&](const fs::path& dir) { /* writes the old state under dir */ },
//       .write = [&](Env& env, const fs::path& dir) { return WriteAliases(..., env); },
//       .read = [&](const fs::path& dir) { return ReadAliasesAsText(dir); },
//       .old_state = "...", .new_state = "..."});
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace pillar::testing {

struct CrashCase {
  // Leaves the old state under `dir` (with the real Env).
  std::function<void(const std::filesystem::path& dir)> prepare;
  // The write under test, through `env`.
  std::function<absl::Status(Env& env, const std::filesystem::path& dir)> write;
  // What a restarted process finds, as comparable text; an error when it finds nothing usable.
  std::function<absl::StatusOr<std::string>(const std::filesystem::path& dir)> read;
  std::string old_state;
  std::string new_state;
};

// Returns how many faulted runs found the old state and how many the new one. A writer whose
// last step is its commit point (PublishAtomically: the directory's fsync) leaves the new state
// only when no step fails, which the first, fault-free run checks; one with steps after its
// commit point (a checkpoint save, then its `latest` pointer) leaves either.
struct CrashOutcomes {
  int old_seen = 0;
  int new_seen = 0;
};

inline CrashOutcomes ExpectOldOrNewAfterACrashAtEveryStep(const CrashCase& c) {
  CrashOutcomes outcomes;
  int64_t steps = 0;
  {
    TempDir dir;
    c.prepare(dir.path());
    FaultEnv env;
    const absl::Status written = c.write(env, dir.path());
    EXPECT_TRUE(written.ok()) << "the write fails without a fault: " << written;
    steps = env.ops();
    EXPECT_GT(steps, 0) << "the write does not go through the Env";
    absl::StatusOr<std::string> read = c.read(dir.path());
    EXPECT_TRUE(read.ok() && *read == c.new_state) << "the write does not write the new state";
  }
  for (FaultEnv::Fault fault : {FaultEnv::Fault::kError, FaultEnv::Fault::kShortWrite,
                                FaultEnv::Fault::kNoSpace, FaultEnv::Fault::kStop}) {
    for (int64_t at = 1; at <= steps; ++at) {
      TempDir dir;
      c.prepare(dir.path());
      FaultEnv env;
      env.FailAt(at, fault);
      const absl::Status written = c.write(env, dir.path());
      env.Crash();
      absl::StatusOr<std::string> found = c.read(dir.path());
      const std::string where =
          "fault " + std::to_string(int(fault)) + " at step " + std::to_string(at);
      if (!found.ok()) {
        ADD_FAILURE() << where << ": nothing usable after the crash: " << found.status();
        continue;
      }
      if (*found == c.new_state) {
        ++outcomes.new_seen;
      } else if (*found == c.old_state) {
        ++outcomes.old_seen;
        EXPECT_FALSE(written.ok()) << where << ": a write that reported success was lost";
      } else {
        ADD_FAILURE() << where << ": a torn state after the crash: " << *found;
      }
    }
  }
  return outcomes;
}

}  // namespace pillar::testing
