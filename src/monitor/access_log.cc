#include "monitor/access_log.h"

#include <fcntl.h>

#include <algorithm>

#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::monitor {

namespace {
constexpr size_t kFlushBytes = 64 * 1024;
}

AccessLog::~AccessLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
  Flush();
  if (owned_ && file_ != nullptr) std::fclose(file_);
}

absl::Status AccessLog::Open(const std::string& destination, absl::Duration flush_interval) {
  if (destination.empty()) return absl::OkStatus();
  if (destination == "-") {
    file_ = stdout;
  } else {
    // 0640: access logs name callers and paths; not for every local user.
    int fd = ::open(destination.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0 || (file_ = ::fdopen(fd, "a")) == nullptr) {
      return absl::PermissionDeniedError(StrCat("cannot open access log ", destination));
    }
    owned_ = true;
  }
  flusher_ = std::thread([this, flush_interval] {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), flush_interval);
      if (!buffer_.empty()) {
        FlushLocked();
      }
    }
  });
  return absl::OkStatus();
}

void AccessLog::Write(const AccessRecord& r) {
  if (file_ == nullptr) return;
  JsonWriter w(320);
  w.BeginObject();
  w.Key("ts_us");
  w.Int(SystemClock().UnixMicros());
  auto text = [&](std::string_view key, std::string_view value) {
    if (value.empty()) return;
    w.Key(key);
    w.String(value);
  };
  // A negative value is not known.
  auto number = [&](std::string_view key, int64_t value) {
    if (value < 0) return;
    w.Key(key);
    w.Int(value);
  };
  auto micros = [&](std::string_view key, int64_t nanos) {
    if (nanos < 0) return;
    w.Key(key);
    w.Thousandths(nanos);
  };
  text("request_id", r.request_id);
  text("listener", r.listener);
  text("remote", r.remote);
  text("method", r.method);
  text("path", r.path);
  text("operation", r.operation);
  w.Key("status");
  w.Int(r.status);
  text("outcome", r.outcome);
  text("reason", r.reason);
  if (!r.model.empty()) {
    w.Key("model");
    w.String(r.model);
    w.Key("version");
    w.String(r.version);
  }
  text("fallback", r.fallback);
  text("job", r.job);
  text("principal", r.principal);
  text("tenant", r.tenant);
  micros("duration_us", r.duration_ns);
  micros("queue_us", r.queue_ns);
  micros("compute_us", r.compute_ns);
  number("batch_size", r.batch_size);
  number("request_bytes", r.request_bytes);
  number("response_bytes", r.response_bytes);
  number("prompt_tokens", r.prompt_tokens);
  number("completion_tokens", r.completion_tokens);
  micros("first_token_us", r.first_token_ns);
  text("error", r.error);
  w.EndObject();
  Write(std::string_view(w.str()));
}

void AccessLog::Write(std::string_view line) {
  if (file_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  buffer_.append(line);
  buffer_.push_back('\n');
  if (buffer_.size() >= kFlushBytes) {
    FlushLocked();
  }
}

void AccessLog::FlushLocked() {
  if (buffer_.empty()) return;
  const bool ok = std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size() &&
                  std::fflush(file_) == 0;
  if (!ok) {
    // A full disk must not stop serving; say so once per episode, and count what was lost.
    lost_lines_ += int64_t(std::count(buffer_.begin(), buffer_.end(), '\n'));
    if (!failing_)
      std::fprintf(stderr, "pillar: the access log cannot be written; lines are lost\n");
    std::clearerr(file_);
  } else if (failing_) {
    std::fprintf(stderr, "pillar: the access log is written again (%lld lines were lost)\n",
                 static_cast<long long>(lost_lines_));
  }
  failing_ = !ok;
  buffer_.clear();
}

void AccessLog::Flush() {
  if (file_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  FlushLocked();
}

}  // namespace pillar::monitor
