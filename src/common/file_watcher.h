// Watches one small file and hands its new content to a callback when it changes (policy,
// JWKS). Polling stat() is deliberate: it works on every filesystem, including the bind mounts
// and ConfigMap symlink swaps where inotify misses the change, and costs nothing at 1 Hz.
//
//   FileWatcher watcher("policy.toml", absl::Seconds(1), 1 << 20,
//                       [](const std::string& text) { return Apply(text); });
//   PILLAR_RETURN_IF_ERROR(watcher.LoadNow());   // first load, synchronous
//   watcher.Start();                             // later changes, from a background thread
// A callback error keeps the previous state (the caller's choice) and is logged once per
// distinct content, prefixed with `what`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/files.h"

namespace pillar {

class FileWatcher {
 public:
  using Apply = std::function<absl::Status(const std::string& content)>;
  // How the file is read (common/files.h): ReadSmallFile, or ReadTrustedFile for a file whose
  // owner and mode must be checked on the descriptor that is read.
  using Reader =
      std::function<absl::StatusOr<std::string>(const std::filesystem::path&, std::uintmax_t)>;

  FileWatcher(std::string path, std::string what, absl::Duration interval, uintmax_t max_bytes,
              Apply apply, Reader read = ReadSmallFile);
  ~FileWatcher();
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

  // Reads and applies the file now; the error of the read or of `apply`.
  [[nodiscard]] absl::Status LoadNow();
  // Polls every `interval` until destruction.
  void Start();

  int64_t reloads() const { return reloads_.load(); }
  int64_t failures() const { return failures_.load(); }

 private:
  bool Changed();
  void Loop();

  const std::string path_;
  const std::string what_;
  const absl::Duration interval_;
  const uintmax_t max_bytes_;
  const Apply apply_;
  const Reader read_;
  FileStamp stamp_;  // touched by LoadNow() before Start() and by the loop after
  std::string last_error_;
  std::atomic<int64_t> reloads_{0};
  std::atomic<int64_t> failures_{0};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pillar
