// An audit chain in one append-only local file (the format is audit_log_format.h), locked with
// flock(2) so that a server and CLI commands on the same host can both append to it.
//
//   PILLAR_ASSIGN_OR_RETURN(auto store, FileAuditStore::Open("/var/lib/pillar/audit.log"));
//   AuditLog log(std::move(store), options);
//
//   ReadAuditFile(path, [](std::string_view line, uint64_t offset) { ...; return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "audit/audit_store.h"

namespace pillar::audit {

class FileAuditStore final : public AuditStore {
 public:
  // Opens the log, creating it (mode 0600) when missing.
  static absl::StatusOr<std::unique_ptr<FileAuditStore>> Open(std::string path);
  ~FileAuditStore() override;

  absl::StatusOr<ChainHead> Begin() override;
  absl::Status Commit(std::span<const EncodedRecord> records, std::string_view lines) override;
  void Abort() override;
  absl::Status Sync() override;
  absl::Status PublishCheckpoint(std::string_view payload) override;
  std::string Describe() const override { return "file " + path_; }

  // Bytes of torn records removed so far (by Begin), for tests and metrics.
  uint64_t repaired_bytes() const { return repaired_bytes_; }

 private:
  FileAuditStore(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  // Finds the head from the file's last records, removing a torn tail. Called with the lock.
  absl::Status RecoverHead(uint64_t size);

  const std::string path_;
  const int fd_;
  uint64_t end_ = UINT64_MAX;  // the file's size after this writer's last commit
  ChainHead head_;
  uint64_t repaired_bytes_ = 0;
  ChainHasher hasher_;
};

// Calls `line` for each complete line (without its LF) of the log at `path` that starts at or
// after byte `from` (a line boundary: 0, or just past a line's LF), with its byte offset, until
// it returns false. Returns the number of bytes after the last LF: a torn last record, or 0.
// Reads the file through mmap; the caller does its own checking of each line.
absl::StatusOr<uint64_t> ReadAuditFile(
    const std::string& path, const std::function<bool(std::string_view, uint64_t)>& line,
    uint64_t from = 0);

// The newest published checkpoint's payload beside the log; NotFound when there is none.
absl::StatusOr<std::string> ReadPublishedCheckpoint(const std::string& log_path);

}  // namespace pillar::audit
