// What a writer of an append-only file (the access log, the audit log) calls as the file grows,
// so that the file holds about two steps of the page cache instead of everything it ever wrote.
// Once a step of bytes has been written past the last point, the kernel is asked to start writing
// them out (sync_file_range, without waiting), and the step it was asked for before is dropped
// from the cache (posix_fadvise DONTNEED: clean pages only; one still being written is left to
// the kernel's reclaim). Nothing is made more or less durable: that stays the writer's fsync.
//
// Why: a log written at tens of MB/s otherwise fills the page cache with pages nobody reads
// again, crowding out what the cache is for (model weights, checkpoints); and on a VM whose
// memory the host backs only when first touched (free pages handed back to it), a cache that
// grows into fresh memory pays a host fault for every 4 KiB it takes: 3 GB appended at 215 MB/s,
// against 2,360 MB/s with the pages dropped behind and taken again (docs/benchmarks.md).
//
//   DropBehind behind(end_at_open);
//   ... write ...;  behind.Wrote(fd, end_now);
#pragma once

#include <cstdint>

namespace pillar {

class DropBehind {
 public:
  static constexpr uint64_t kStep = 4 << 20;
  // `end`: where the file ends when the writer starts; what is before it is left alone.
  explicit DropBehind(uint64_t end = 0);

  // After a write that left `fd`'s file ending at `end`. Errors are ignored: it is advice.
  void Wrote(int fd, uint64_t end);

 private:
  uint64_t started_;  // writing out was asked for the bytes before this (a page boundary)
  uint64_t dropped_;  // dropped before this
};

}  // namespace pillar
