#include "monitor/access_log.h"

#include <fcntl.h>

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
        std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
        std::fflush(file_);
        buffer_.clear();
      }
    }
  });
  return absl::OkStatus();
}

void AccessLog::Write(std::string_view line) {
  if (file_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  buffer_.append(line);
  buffer_.push_back('\n');
  if (buffer_.size() >= kFlushBytes) {
    std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
    std::fflush(file_);
    buffer_.clear();
  }
}

void AccessLog::Flush() {
  if (file_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
  std::fflush(file_);
  buffer_.clear();
}

}  // namespace pillar::monitor
