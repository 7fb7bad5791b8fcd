// An Env for tests that fails on demand and can simulate a crash, after leveldb's
// FaultInjectionTestEnv: operation number `fail_at` (counting every call) fails with the chosen
// fault, and Crash() throws away what a power loss would — file bytes appended after the last
// Sync(), and renames not yet made durable by a SyncDir() of their directory (a file a rename
// replaced comes back).
//
//   FaultEnv env;
//   env.FailAt(7, FaultEnv::Fault::kShortWrite);
//   EXPECT_FALSE(WriteCheckpoint(env, ...).ok());
//   env.Crash();   // then look at what a restarted process would find
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"

namespace pillar::testing {

class FaultEnv final : public Env {
 public:
  enum class Fault {
    kError,       // the call fails, nothing happens
    kShortWrite,  // an append writes half of its bytes, then fails
    kNoSpace,     // ENOSPC
    kStop,        // this call and every later one fail: the process died here
  };

  void FailAt(int64_t op, Fault fault) {
    fail_at_ = op;
    fault_ = fault;
  }
  int64_t ops() const { return ops_; }
  // Every RemoveAll of a path containing `fragment` fails (an entry a failing disk will not let
  // go), however often it is tried.
  void FailRemovalsOf(std::string fragment) { unremovable_ = std::move(fragment); }
  // Drops unsynced file bytes and undurable renames, then heals (no more faults).
  void Crash();

  [[nodiscard]] absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, uint32_t mode) override;
  [[nodiscard]] absl::Status ReadAt(const std::string& path, uint64_t offset,
                                    std::span<std::byte> out) override {
    return base_->ReadAt(path, offset, out);
  }
  [[nodiscard]] absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) override {
    return base_->MapFile(path);
  }
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return base_->ListDir(path);
  }
  bool Exists(const std::string& path) override { return base_->Exists(path); }
  bool IsLink(const std::string& path) override { return base_->IsLink(path); }
  [[nodiscard]] absl::Status CreateDir(const std::string& path) override;
  [[nodiscard]] absl::Status RemoveAll(const std::string& path) override;
  [[nodiscard]] absl::Status Rename(const std::string& from, const std::string& to) override;
  [[nodiscard]] absl::Status SyncDir(const std::string& path) override;
  [[nodiscard]] absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) override {
    return base_->LockFile(path);
  }

  // For FaultFile: counts the op and returns the fault to apply, if any.
  std::optional<Fault> Next();
  void Synced(const std::string& path, uint64_t size) { synced_[path] = size; }
  void Written(const std::string& path, uint64_t size) { written_[path] = size; }

 private:
  Env* base_ = Env::Default();
  int64_t ops_ = 0;
  int64_t fail_at_ = -1;
  Fault fault_ = Fault::kError;
  bool stopped_ = false;
  std::string unremovable_;
  std::map<std::string, uint64_t> synced_;   // path -> bytes durable
  std::map<std::string, uint64_t> written_;  // path -> bytes written
  struct PendingRename {
    std::string from, to, dir;
    std::optional<std::string> replaced;  // the bytes of the file the rename replaced
  };
  std::vector<PendingRename> pending_renames_;
};

}  // namespace pillar::testing
