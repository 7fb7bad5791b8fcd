#include "common/drop_behind.h"

#include <fcntl.h>

namespace pillar {
namespace {

// Whole pages only: the page a writer appends to next is not dropped (it would be read back).
constexpr uint64_t kPage = 4096;
constexpr uint64_t PageBelow(uint64_t offset) { return offset & ~(kPage - 1); }

}  // namespace

DropBehind::DropBehind(uint64_t end) : started_(PageBelow(end)), dropped_(PageBelow(end)) {}

void DropBehind::Wrote(int fd, uint64_t end) {
  const uint64_t boundary = PageBelow(end);
  if (boundary < started_ + kStep) return;
  // The step before was handed to writing out one step ago: clean by now unless the disk is
  // slower than the log, and then its pages go with the kernel's reclaim, as they would anyway.
  if (started_ > dropped_) {
    (void)::posix_fadvise(fd, off_t(dropped_), off_t(started_ - dropped_), POSIX_FADV_DONTNEED);
    dropped_ = started_;
  }
  (void)::sync_file_range(fd, off_t(started_), off_t(boundary - started_), SYNC_FILE_RANGE_WRITE);
  started_ = boundary;
}

}  // namespace pillar
