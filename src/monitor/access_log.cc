#include "monitor/access_log.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::monitor {

namespace {
constexpr size_t kFlushBytes = 64 * 1024;         // the log's thread is woken to write
constexpr size_t kMaxBuffered = 8 * 1024 * 1024;  // beyond, lines are dropped
}  // namespace

AccessLog::~AccessLog() {
  wakeup_.Stop();
  if (flusher_.joinable()) flusher_.join();
  Flush();
  {
    absl::MutexLock lock(&write_mu_);
    if (failed_lines_ > 0) {
      std::fprintf(stderr, "pillar: the access log lost %lld lines it could not write\n",
                   static_cast<long long>(failed_lines_));
    }
  }
  if (owned_ && fd_ >= 0) ::close(fd_);
}

absl::Status AccessLog::Open(const std::string& destination, absl::Duration flush_interval) {
  if (destination.empty()) return absl::OkStatus();
  if (destination == "-") {
    std::fflush(stdout);
    fd_ = STDOUT_FILENO;
  } else {
    // 0640: access logs name callers and paths; not for every local user. O_NONBLOCK: opening
    // a FIFO nobody reads fails (ENXIO) instead of waiting, and a full one does not block.
    fd_ = ::open(destination.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0640);
    if (fd_ < 0) {
      return absl::PermissionDeniedError(
          StrCat("cannot open access log ", destination, ": ",
                 errno == ENXIO ? "a FIFO that nobody reads" : std::strerror(errno)));
    }
    owned_ = true;
  }
  struct stat st {};
  stream_ = ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode);
  // The destructor writes what is left once the thread is gone.
  flusher_ = std::thread([this, flush_interval] {
    NameThisThread("access-log");
    while (wakeup_.Wait(flush_interval)) WriteOut();
  });
  return absl::OkStatus();
}

namespace {

// The members of a line, skipped when not known (an empty text, a negative number).
template <JsonName Name>
void Text(JsonWriter& w, std::string_view value) {
  if (value.empty()) return;
  w.Key<Name>();
  w.String(value);
}

template <JsonName Name>
void Number(JsonWriter& w, int64_t value) {
  if (value < 0) return;
  w.Key<Name>();
  w.Int(value);
}

template <JsonName Name>
void Micros(JsonWriter& w, int64_t nanos) {
  if (nanos < 0) return;
  w.Key<Name>();
  w.Thousandths(nanos);
}

}  // namespace

void AccessLog::Write(const AccessRecord& r) {
  if (fd_ < 0) return;
  // Each thread builds its lines in a string of its own, kept between lines: no allocation.
  thread_local std::string line;
  line.clear();
  JsonWriter w(std::move(line));
  w.BeginObject();
  w.Key<"ts_us">();
  w.Int(SystemClock().UnixMicros());
  Text<"request_id">(w, r.request_id);
  Text<"listener">(w, r.listener);
  Text<"remote">(w, r.remote);
  Text<"method">(w, r.method);
  Text<"path">(w, r.path);
  Text<"operation">(w, r.operation);
  w.Key<"status">();
  w.Int(r.status);
  Text<"outcome">(w, r.outcome);
  Text<"reason">(w, r.reason);
  if (!r.model.empty()) {
    w.Key<"model">();
    w.String(r.model);
    w.Key<"version">();
    w.String(r.version);
  }
  Text<"fallback">(w, r.fallback);
  Text<"job">(w, r.job);
  Text<"principal">(w, r.principal);
  Text<"tenant">(w, r.tenant);
  Micros<"duration_us">(w, r.duration_ns);
  Micros<"queue_us">(w, r.queue_ns);
  Micros<"compute_us">(w, r.compute_ns);
  Number<"batch_size">(w, r.batch_size);
  Number<"request_bytes">(w, r.request_bytes);
  Number<"response_bytes">(w, r.response_bytes);
  Number<"prompt_tokens">(w, r.prompt_tokens);
  Number<"completion_tokens">(w, r.completion_tokens);
  Micros<"first_token_us">(w, r.first_token_ns);
  Text<"error">(w, r.error);
  w.EndObject();
  line = std::move(w).Take();
  Write(std::string_view(line));
}

void AccessLog::Write(std::string_view line) {
  if (fd_ < 0) return;
  {
    absl::MutexLock lock(&mu_);
    if (buffer_.size() + line.size() + 1 > kMaxBuffered) {  // the log's thread cannot keep up
      if (!dropping_) {
        std::fprintf(stderr, "pillar: the access log is not written fast enough; lines are lost\n");
      }
      dropping_ = true;
      ++lost_lines_;
      return;
    }
    const bool below = buffer_.size() < kFlushBytes;
    buffer_.append(line);
    buffer_.push_back('\n');
    if (!below || buffer_.size() < kFlushBytes) return;
  }
  wakeup_.Notify();  // the line that filled the buffer: the log's thread writes it now
}

void AccessLog::WriteOut() {
  absl::MutexLock write_lock(&write_mu_);
  int64_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    if (buffer_.empty()) return;
    writing_.swap(buffer_);  // the serving threads go on with the other buffer
    if (dropping_) {
      dropped = std::exchange(lost_lines_, 0);
      dropping_ = false;
    }
  }
  if (dropped > 0) {
    std::fprintf(stderr, "pillar: the access log is written again (%lld lines were lost)\n",
                 static_cast<long long>(dropped));
  }
  // A line cut by a failed write is ended first, so that the reader's next line is whole.
  if (cut_line_ && WriteSome("\n") == 1) cut_line_ = false;
  const size_t written = cut_line_ ? 0 : WriteSome(writing_);
  const bool ok = written == writing_.size();
  if (!ok) {
    // A full disk or a reader that stopped must not stop serving; say so once per episode, and
    // count what was lost (a line cut short among it).
    failed_lines_ +=
        int64_t(std::count(writing_.begin() + ptrdiff_t(written), writing_.end(), '\n'));
    if (written > 0 && writing_[written - 1] != '\n') cut_line_ = true;
    if (!failing_)
      std::fprintf(stderr, "pillar: the access log cannot be written; lines are lost\n");
  } else if (failing_) {
    std::fprintf(stderr, "pillar: the access log is written again (%lld lines were lost)\n",
                 static_cast<long long>(std::exchange(failed_lines_, 0)));
  }
  failing_ = !ok;
  writing_.clear();
  unadvised_bytes_ += written;
  if (!stream_ && unadvised_bytes_ >= DropBehind::kStep) {
    unadvised_bytes_ = 0;
    struct stat st;
    if (::fstat(fd_, &st) == 0) {
      if (!behind_) behind_.emplace(uint64_t(st.st_size) - std::min<uint64_t>(st.st_size, written));
      behind_->Wrote(fd_, uint64_t(st.st_size));
    }
  }
}

size_t AccessLog::WriteSome(std::string_view data) const {
  constexpr int kStreamPatienceMs = 1000;
  size_t written = 0;
  while (written < data.size()) {
    size_t chunk = data.size() - written;
    if (stream_) {
      // A pipe that polls writable has room for PIPE_BUF bytes: a write of at most that much
      // does not block, whatever the descriptor's own flags (stdout may be a blocking pipe).
      pollfd ready{fd_, POLLOUT, 0};
      if (::poll(&ready, 1, kStreamPatienceMs) != 1 || (ready.revents & POLLOUT) == 0) break;
      chunk = std::min<size_t>(chunk, PIPE_BUF);
    }
    const ssize_t n = ::write(fd_, data.data() + written, chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    written += size_t(n);
  }
  return written;
}

void AccessLog::Flush() {
  if (fd_ < 0) return;
  WriteOut();
}

}  // namespace pillar::monitor
