// The project's storage seam, after leveldb's Env: every file-system call a durable writer makes
// (checkpoints, aliases, model manifests, the audit side file, ports and metrics files) goes
// through it, so tests can make any one of them fail (a short write, ENOSPC, a failed fsync or
// rename, a crash between two steps) and check what survives. Durable replacement of a whole
// file has one implementation, PublishAtomically, below.
//
//   Env* env = Env::Default();
//   PILLAR_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(dir + "/shard-00000.bin", 0600));
//   PILLAR_RETURN_IF_ERROR(file->Append(bytes));
//   PILLAR_RETURN_IF_ERROR(file->Sync());
//   PILLAR_RETURN_IF_ERROR(file->Close());
// Implementations are thread-safe; a WritableFile is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  [[nodiscard]] virtual absl::Status Append(std::span<const std::byte> data) = 0;
  // fdatasync: the bytes appended so far survive a crash.
  [[nodiscard]] virtual absl::Status Sync() = 0;
  [[nodiscard]] virtual absl::Status Close() = 0;
};

// A whole file mapped read-only (a checkpoint shard being loaded): its bytes are the page
// cache's, with no copy. Unmapped when destroyed.
class MappedFile {
 public:
  virtual ~MappedFile() = default;
  virtual std::span<const std::byte> data() const = 0;
};

// An advisory lock held until the object is destroyed (Env::LockFile).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX implementation.
  static Env* Default();

  // Creates a new file for writing with permission bits `mode`. Whatever was at the name is
  // removed first and the file is created exclusively, without following links: whoever may
  // write the directory can leave a link or a FIFO there, and nothing is ever written through
  // one (or waited on).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, uint32_t mode) = 0;
  // Reads `out.size()` bytes at `offset`; an error when the file is shorter.
  [[nodiscard]] virtual absl::Status ReadAt(const std::string& path, uint64_t offset,
                                            std::span<std::byte> out) = 0;
  [[nodiscard]] virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  // Maps the whole file, reading it in now (the caller is about to touch every byte).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) = 0;
  // The names in a directory (not "." or ".."); NotFound when it does not exist.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // Whether `path` itself is a symbolic link (dangling or not), which Exists() follows.
  virtual bool IsLink(const std::string& path) = 0;
  // Creates the directory and its parents, mode 0700; fine when it exists.
  [[nodiscard]] virtual absl::Status CreateDir(const std::string& path) = 0;
  [[nodiscard]] virtual absl::Status RemoveAll(const std::string& path) = 0;
  // rename(2): atomic replacement within one file system.
  [[nodiscard]] virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // fsync of a directory: the names created, renamed or removed in it survive a crash.
  [[nodiscard]] virtual absl::Status SyncDir(const std::string& path) = 0;
  // An exclusive lock on `path` (created, mode 0600, never through a link), for a directory
  // one process at a time may change: FailedPrecondition at once when another holder has it
  // (another process, or another lock in this one); released when the FileLock goes, and by the
  // kernel when its process dies, so a crash leaves no stale lock.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) = 0;
};

// Reads a whole small file (a manifest, the latest pointer) of at most `max_bytes`.
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(Env& env, const std::string& path,
                                                        uint64_t max_bytes);
// Replaces `path` with a file holding `data` (permission bits `mode`) so that a reader, or a
// process restarted after a crash at any step, finds the old file or the new one, whole: write
// `<path>.tmp.<16 random hex digits>`, fsync it, rename it over `path`, fsync the directory.
// Returns only once the new file is durable, so what is reported done survives a power cut.
// Concurrent publishers of one path each rename a whole file of their own; the last wins. A
// crash can leave a `<path>.tmp.*` behind, which readers of each format pass over.
[[nodiscard]] absl::Status PublishAtomically(Env& env, const std::string& path,
                                             std::string_view data, uint32_t mode);

}  // namespace pillar
