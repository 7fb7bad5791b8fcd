// Runs out of descriptors on purpose, in this process, for a test of what pillar does then:
// while it lives, the soft limit on open files equals the lowest free descriptor, so every
// open(), socket() and accept() fails with EMFILE (descriptors are allocated lowest first), or
// every one after the first `spare`.
//
//   { DescriptorShortage shortage;  EXPECT_FALSE(repository.Scan().unreadable.ok()); }
#pragma once

#include <fcntl.h>
#include <sys/resource.h>

namespace pillar::testing {

class DescriptorShortage {
 public:
  explicit DescriptorShortage(int spare = 0) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    int lowest_free = 0;
    while (::fcntl(lowest_free, F_GETFD) != -1) ++lowest_free;
    rlimit low = saved_;
    low.rlim_cur = rlim_t(lowest_free + spare);
    ::setrlimit(RLIMIT_NOFILE, &low);
  }
  ~DescriptorShortage() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  DescriptorShortage(const DescriptorShortage&) = delete;
  DescriptorShortage& operator=(const DescriptorShortage&) = delete;

 private:
  rlimit saved_{};
};

}  // namespace pillar::testing
