// The structured access log: one JSON object per line and per request, with its request id.
// Lines are buffered and flushed at least every `flush_interval`, so logging costs no syscall
// per request on the hot path.
//
//   AccessLog log;  PILLAR_RETURN_IF_ERROR(log.Open("-"));   // "-" stdout, "" off, else a file
//   log.Write(line);
// Write() is thread-safe.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pillar::monitor {

class AccessLog {
 public:
  AccessLog() = default;
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  [[nodiscard]] absl::Status Open(const std::string& destination,
                                  absl::Duration flush_interval = absl::Milliseconds(500));
  bool enabled() const { return file_ != nullptr; }
  // `line` is one JSON object without the trailing newline.
  void Write(std::string_view line);
  void Flush();

 private:
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  absl::Mutex mu_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread flusher_;
};

}  // namespace pillar::monitor
