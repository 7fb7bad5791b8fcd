#include "health/bandwidth.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/strings.h"

namespace pillar::health {
namespace {

using Clock = std::chrono::steady_clock;

// Runs body(thread, begin, end) over [0, n) split in `threads` parts, on that many threads.
template <typename Body>
double Timed(size_t n, int threads, Body body) {
  std::vector<std::thread> pool;
  const auto start = Clock::now();
  const size_t t = size_t(std::max(1, threads));
  for (size_t i = 0; i < t; ++i) {
    pool.emplace_back([&, i] { body(n * i / t, n * (i + 1) / t); });
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};

template <typename T>
std::unique_ptr<T[], FreeDeleter> Aligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(n, 1) * sizeof(T)) != 0) return nullptr;
  return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(p));
}

}  // namespace

double TriadBandwidth(size_t bytes, int threads, int repeats) {
  const size_t n = std::max<size_t>(bytes / (3 * sizeof(double)), 1);
  auto a = Aligned<double>(n), b = Aligned<double>(n), c = Aligned<double>(n);
  if (!a || !b || !c) return 0;
  // First touch on the threads that will use each part (the pages land on their NUMA node).
  Timed(n, threads, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      a[i] = 0;
      b[i] = 1;
      c[i] = 2;
    }
  });
  const double scalar = 3;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    double* pa = a.get();
    const double* pb = b.get();
    const double* pc = c.get();
    const double seconds = Timed(n, threads, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) pa[i] = pb[i] + scalar * pc[i];
    });
    best = std::max(best, 3.0 * sizeof(double) * double(n) / 1e9 / seconds);
  }
  // Keep the result observable so the loops are not removed.
  if (a[n / 2] != 1 + scalar * 2) return 0;
  return best;
}

double MemcpyBandwidth(size_t bytes, int threads, int repeats) {
  const size_t n = std::max<size_t>(bytes / 2, 1);
  auto from = Aligned<char>(n), to = Aligned<char>(n);
  if (!from || !to) return 0;
  Timed(n, threads, [&](size_t begin, size_t end) {
    std::memset(from.get() + begin, 1, end - begin);
    std::memset(to.get() + begin, 0, end - begin);
  });
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double seconds = Timed(n, threads, [&](size_t begin, size_t end) {
      std::memcpy(to.get() + begin, from.get() + begin, end - begin);
    });
    best = std::max(best, 2.0 * double(n) / 1e9 / seconds);
  }
  if (to[n - 1] != 1) return 0;
  return best;
}

[[nodiscard]] absl::StatusOr<double> SequentialWriteBandwidth(const std::string& dir,
                                                              size_t bytes) {
  std::string path = StrCat(dir, "/.pillar-health-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::UnavailableError(
        StrCat("cannot create a file in ", dir, ": ", std::strerror(errno)));
  }
  unlink(path.c_str());  // gone whatever happens next; the space is freed on close
  constexpr size_t kBlock = 1 << 20;
  auto block = Aligned<char>(kBlock);
  if (!block) {
    close(fd);
    return absl::ResourceExhaustedError("out of memory");
  }
  // Not zeros: a file system that compresses or dedupes would measure nothing.
  for (size_t i = 0; i < kBlock; ++i) block[i] = char((i * 2654435761u) >> 13);
  const auto start = Clock::now();
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kBlock, bytes - done);
    const ssize_t w = write(fd, block.get(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      close(fd);
      return absl::UnavailableError(StrCat("writing in ", dir, ": ", std::strerror(e)));
    }
    done += size_t(w);
  }
  if (fsync(fd) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(StrCat("fsync in ", dir, ": ", std::strerror(e)));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  close(fd);
  return double(bytes) / 1e6 / seconds;
}

}  // namespace pillar::health
