#include "common/file_watcher.h"

#include <cstdio>

#include "common/files.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar {

FileWatcher::FileWatcher(std::string path, std::string what, absl::Duration interval,
                         uintmax_t max_bytes, Apply apply, Reader read)
    : path_(std::move(path)),
      what_(std::move(what)),
      interval_(interval),
      max_bytes_(max_bytes),
      apply_(std::move(apply)),
      read_(std::move(read)) {}

FileWatcher::~FileWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool FileWatcher::Changed() {
  const FileStamp now = StampOf(path_);
  if (now == stamp_) return false;
  stamp_ = now;
  return true;
}

absl::Status FileWatcher::LoadNow() {
  Changed();  // remember what was loaded, so the loop does not load it again
  absl::StatusOr<std::string> content = read_(path_, max_bytes_);
  if (!content.ok()) return content.status();
  return apply_(*content);
}

void FileWatcher::Start() {
  thread_ = std::thread([this] {
    NameThisThread("file-watcher");
    Loop();
  });
}

void FileWatcher::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
    if (stopping_) break;
    mu_.Unlock();
    if (Changed()) {
      absl::Status s = LoadNow();
      if (s.ok()) {
        reloads_.fetch_add(1);
        last_error_.clear();
        std::fprintf(stderr, "pillar: %s reloaded from %s\n", what_.c_str(), path_.c_str());
      } else {
        failures_.fetch_add(1);
        if (s.ToString() != last_error_) {
          last_error_ = s.ToString();
          std::fprintf(stderr, "pillar: %s reload refused, keeping the previous one: %s\n",
                       what_.c_str(), std::string(s.message()).c_str());
        }
      }
    }
    mu_.Lock();
  }
}

}  // namespace pillar
