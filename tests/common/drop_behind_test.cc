#include "common/drop_behind.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "testing/temp_dir.h"

namespace pillar {
namespace {

// How many of the pages of [offset, offset + length) of `fd`'s file are in the page cache.
size_t ResidentPages(int fd, uint64_t offset, uint64_t length) {
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, off_t(offset));
  EXPECT_NE(map, MAP_FAILED);
  if (map == MAP_FAILED) return 0;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((length + page - 1) / page);
  EXPECT_EQ(::mincore(map, length, resident.data()), 0);
  ::munmap(map, length);
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

// What an append-only log wrote more than two steps back is out of the page cache; the last two
// steps, and the page still being appended to, are in it. What the file held before the writer
// started is left alone.
TEST(DropBehindTest, AnAppendedFileKeepsAboutTwoStepsInThePageCache) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "log").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  struct statfs fs;
  ASSERT_EQ(::fstatfs(fd, &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) {
    ::close(fd);
    GTEST_SKIP() << "the temporary directory is a tmpfs, whose pages are the file: nothing drops";
  }
  const std::string before(64 * 1024, 'b');
  ASSERT_EQ(::write(fd, before.data(), before.size()), ssize_t(before.size()));
  DropBehind behind(before.size());
  const std::string line(1000, 'x');
  uint64_t end = before.size();
  constexpr uint64_t kTotal = 5 * DropBehind::kStep + 12345;
  while (end < kTotal) {
    ASSERT_EQ(::write(fd, line.data(), line.size()), ssize_t(line.size()));
    end += line.size();
    // Written out at once here, so that what is dropped is clean (a disk slower than the log
    // leaves its pages to the kernel's reclaim instead).
    if (end % (1 << 20) < line.size()) {
      ASSERT_EQ(::fdatasync(fd), 0);
    }
    behind.Wrote(fd, end);
  }
  const uint64_t step = DropBehind::kStep;
  // The first steps after the start: dropped.
  EXPECT_EQ(ResidentPages(fd, step, 2 * step), 0u);
  // The last step and the tail: still cached.
  const uint64_t tail = (end - step) & ~uint64_t(4095);
  EXPECT_GT(ResidentPages(fd, tail, end - tail), (end - tail) / 4096 / 2);
  // The bytes before the writer started: untouched by it.
  EXPECT_EQ(ResidentPages(fd, 0, before.size()), before.size() / 4096);
  ::close(fd);
}

}  // namespace
}  // namespace pillar
