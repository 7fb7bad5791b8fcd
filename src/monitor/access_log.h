// The structured access log: one JSON object per line and per request, with its request id.
// Lines are buffered and written by the log's own thread at least every `flush_interval`, and
// as soon as 64 KiB are waiting, so logging costs no syscall on the threads that serve: they
// only append to a buffer. A disk that stalls does not stall them either: past 8 MiB waiting,
// lines are dropped and counted (one message per episode says how many), as on a full disk.
// A pipe, FIFO or terminal is written only as far as it takes the bytes within a second: a
// reader that stops reading costs the lines, never the server or its shutdown (a stalled FIFO
// reader once kept SIGTERM from ending it); a FIFO nobody reads is refused at Open().
//
//   AccessLog log;  PILLAR_RETURN_IF_ERROR(log.Open("-"));   // "-" stdout, "" off, else a file
//   log.Write(line);
// Write() is thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/drop_behind.h"
#include "common/wakeup.h"

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
  bool enabled() const { return fd_ >= 0; }
  // Writes `record` as one JSON object on one line, with the current time as ts_us.
  void Write(const AccessRecord& record);
  // `line` is one JSON object without the trailing newline.
  void Write(std::string_view line);
  void Flush();

 private:
  // Takes what is buffered and writes it, in order with every other write.
  void WriteOut() ABSL_LOCKS_EXCLUDED(mu_);

  // Writes `data` whole, or as much as a pipe takes within kStreamPatience; the bytes written.
  size_t WriteSome(std::string_view data) const;

  int fd_ = -1;
  bool owned_ = false;
  bool stream_ = false;  // not a regular file: a pipe, FIFO, socket or terminal
  // Held while a taken buffer is written, so that buffers reach the file in the order taken;
  // the serving threads never take it.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::string writing_ ABSL_GUARDED_BY(write_mu_);  // the buffer being written, kept for reuse
  bool failing_ ABSL_GUARDED_BY(write_mu_) = false;
  int64_t failed_lines_ ABSL_GUARDED_BY(write_mu_) = 0;  // lost to failed writes this episode
  bool cut_line_ ABSL_GUARDED_BY(write_mu_) = false;     // a write stopped inside a line
  // A regular file's lines are dropped from the page cache behind the writer
  // (common/drop_behind.h), looked at each DropBehind::kStep bytes written (the file may be
  // appended to by others: its end is read then).
  std::optional<DropBehind> behind_ ABSL_GUARDED_BY(write_mu_);
  uint64_t unadvised_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  absl::Mutex mu_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  int64_t lost_lines_ ABSL_GUARDED_BY(mu_) = 0;  // since the last message that said so
  bool dropping_ ABSL_GUARDED_BY(mu_) = false;   // the buffer is full: lines are dropped
  Wakeup wakeup_;  // the log's thread sleeps on it, not on mu_ (common/wakeup.h says why)
  std::thread flusher_;
};

}  // namespace pillar::monitor
