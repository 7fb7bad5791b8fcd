// An audit chain in one append-only local file (the format is audit_log_format.h), locked with
// flock(2) so that a server and CLI commands on the same host can both append to it.
//
// A store remembers where the last record it knows ends (one it wrote, or one it checked) and
// that record's chain. Each Begin() checks that the record is still there and that every record
// appended since (by a CLI command, or anyone who can write the file) links on from it; a log
// cut or rewritten under a running writer is refused, never extended or checkpointed. A store
// is used by one thread at a time (AuditLog's writer).
//
// Begin() waits for the lock at most lock_wait (kDefaultLockWait): a process that holds the lock
// for longer (a stuck command, anyone who may open the file and flock it) makes Begin() fail
// with Unavailable, which AuditLog counts, ALERTs and retries, instead of stalling the writer
// without a word.
//
//   PILLAR_ASSIGN_OR_RETURN(auto store, FileAuditStore::Open("/var/lib/pillar/audit.log"));
//   AuditLog log(std::move(store), options);
//
//   ReadAuditFile(path, [](std::string_view line, uint64_t offset) { ...; return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "audit/audit_store.h"
#include "common/drop_behind.h"
#include "common/env.h"

namespace pillar::audit {

class FileAuditStore final : public AuditStore {
 public:
  // A writer holds the lock for one Begin() and Commit(): reading the records appended since
  // its last append and one pwrite, milliseconds (the fdatasync comes after the lock is
  // released). 2 s is a thousand times that, so only a holder that is stuck or hostile trips
  // it; and it is what bounds the time to the first ALERT, a CLI change's refusal when the log
  // cannot be locked at all, and (two attempts) an AuditLog's shutdown.
  static constexpr absl::Duration kDefaultLockWait = absl::Seconds(2);

  // Opens the log, creating it (mode 0600) when missing. A symbolic link or anything but a
  // regular file at `path` is refused: the store truncates a torn tail, and must never do that
  // to a file someone pointed the log at. `lock_wait`: how long Begin() waits for the lock.
  // `env` publishes the checkpoint side file (the log itself is appended to by descriptor).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FileAuditStore>> Open(
      std::string path, absl::Duration lock_wait = kDefaultLockWait, Env* env = Env::Default());
  ~FileAuditStore() override;

  [[nodiscard]] absl::StatusOr<ChainHead> Begin() override;
  [[nodiscard]] absl::Status Commit(std::span<const EncodedRecord> records,
                                    std::string_view lines) override;
  void Abort() override;
  [[nodiscard]] absl::Status Sync() override;
  [[nodiscard]] absl::Status PublishCheckpoint(std::string_view payload) override;
  std::string Describe() const override { return "file " + path_; }

  // Bytes of torn records removed so far (by Begin), for tests and metrics.
  uint64_t repaired_bytes() const { return repaired_bytes_; }

 private:
  FileAuditStore(std::string path, int fd, absl::Duration lock_wait, Env* env)
      : path_(std::move(path)), fd_(fd), lock_wait_(lock_wait), env_(env) {}
  // flock(LOCK_EX), polled with LOCK_NB: flock itself cannot time out, and a signal to cut a
  // blocking one short would reach whichever thread the process lets take it.
  [[nodiscard]] absl::Status Lock();
  // The rest are called with the lock held.
  // First use: learns the head from the file's last two records (there is nothing yet to check
  // them against), removing a torn tail.
  [[nodiscard]] absl::Status RecoverHead(uint64_t size);
  // Later uses: checks that the record this store knows still ends at end_ with head_'s chain,
  // then checks and takes in the records appended after it.
  [[nodiscard]] absl::Status CheckKnownHead(uint64_t size);
  [[nodiscard]] absl::Status FollowAppended(uint64_t size);
  // Removes the bytes from `complete` (just past the last record's LF) to `size`.
  [[nodiscard]] absl::Status RemoveTornTail(uint64_t complete, uint64_t size);
  // An error for a log that no longer holds what this store knows it held.
  [[nodiscard]] absl::Status Rewritten(std::string_view what) const;

  const std::string path_;
  const int fd_;
  const absl::Duration lock_wait_;
  Env* const env_;
  // What this store knows of the file: it ends at end_ (UINT64_MAX: not read yet), where the
  // last record, starting at last_start_, has the chain head_.chain. Set by the store's own
  // commits and by the records it checked; kept when a check fails, so a log altered under the
  // store stays refused until what it knows is back.
  uint64_t end_ = UINT64_MAX;
  // What this writer appended is dropped from the page cache behind it (common/drop_behind.h);
  // from the end the file had at its first commit.
  std::optional<DropBehind> behind_;
  uint64_t last_start_ = 0;
  ChainHead head_;
  uint64_t repaired_bytes_ = 0;
  ChainHasher hasher_;
};

// Calls `line` for each complete line (without its LF) of the log at `path` that starts at or
// after byte `from` (a line boundary: 0, or just past a line's LF), with its byte offset, until
// it returns false. Returns the number of bytes after the last LF: a torn last record, or 0.
// The caller does its own checking of each line; a line longer than format::kMaxLineBytes (no
// record is) is passed cut to kMaxLineBytes + 1 bytes, so memory stays bounded whatever the file
// holds. A symbolic link or a non-regular file at `path` is an error, as for the writer.
// Reads with pread, in chunks, never through mmap: a log cut while it is read (by whoever may
// write it, or a writer's torn-tail repair) would make touching a mapped page past the new end
// SIGBUS the reader. A log that is shorter at the end of the read than at its start is a
// DataLoss error ("shrank while it was read"), not a crash and not a quietly shorter chain.
[[nodiscard]] absl::StatusOr<uint64_t> ReadAuditFile(
    const std::string& path, const std::function<bool(std::string_view, uint64_t)>& line,
    uint64_t from = 0);

// The newest published checkpoint's payload beside the log; NotFound when there is none.
// A symbolic link or a non-regular file there is an error (the writer replaces the file by a
// rename, so it never leaves one).
[[nodiscard]] absl::StatusOr<std::string> ReadPublishedCheckpoint(const std::string& log_path);

}  // namespace pillar::audit
