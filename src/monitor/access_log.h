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

// One access-log line. Empty strings and negative numbers are left out of the line.
struct AccessRecord {
  std::string_view request_id;
  std::string_view listener;
  std::string_view remote;
  std::string_view method;
  std::string_view path;
  std::string_view operation;
  int status = 0;
  std::string_view outcome;
  std::string_view reason;  // for requests refused by the HTTP layer
  std::string_view model;
  std::string_view version;
  std::string_view fallback;   // "<model>/<version>" of the fallback that answered, if one did
  std::string_view job;        // the asynchronous job submitted, run or read, if any
  std::string_view principal;  // "key:<id>", "jwt:<sub>", "mtls:<name>"
  std::string_view tenant;     // the principal's, when it has one
  // Times in nanoseconds, written as microseconds with up to three decimals.
  int64_t duration_ns = -1;
  int64_t queue_ns = -1;
  int64_t compute_ns = -1;
  int64_t batch_size = -1;
  int64_t request_bytes = -1;
  int64_t response_bytes = -1;
  // A language model's call: the tokens it used (the model's usage, else pillar's estimate of the
  // prompt) and when its first token reached the client (streams).
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t first_token_ns = -1;
  std::string_view error;
};

class AccessLog {
 public:
  AccessLog() = default;
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  [[nodiscard]] absl::Status Open(const std::string& destination,
                                  absl::Duration flush_interval = absl::Milliseconds(500));
  bool enabled() const { return file_ != nullptr; }
  // Writes `record` as one JSON object on one line, with the current time as ts_us.
  void Write(const AccessRecord& record);
  // `line` is one JSON object without the trailing newline.
  void Write(std::string_view line);
  void Flush();

 private:
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::FILE* file_ = nullptr;
  bool owned_ = false;
  absl::Mutex mu_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lost_lines_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread flusher_;
};

}  // namespace pillar::monitor
