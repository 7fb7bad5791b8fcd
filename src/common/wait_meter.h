// WaitMeter: how long something has waited, summed over its waits, a wait in progress counted
// to the moment asked. Written by one thread, read from any (a sequence lock over atomics): an HTTP
// connection counts the time its streamed writes wait for the client's socket (http/session.cc),
// and a stream's producer, on another thread, weighs the client's share of the stream's time with
// it.
//
//   meter.Began(clock.MonotonicNanos());   // the socket took only part of a write
//   meter.Ended(clock.MonotonicNanos());   // the rest went out
//   int64_t waited = meter.nanos(clock.MonotonicNanos());
#pragma once

#include <atomic>
#include <cstdint>

namespace pillar {

class WaitMeter {
 public:
  int64_t nanos(int64_t now_ns) const {
    // A reader that met a write in progress reads again (review helper-107: a wait that ended
    // between the reads of its start and of the sum was counted twice).
    for (;;) {
      const uint64_t before = version_.load(std::memory_order_acquire);
      const int64_t total = total_ns_.load(std::memory_order_relaxed);
      const int64_t since = since_ns_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (before % 2 == 0 && version_.load(std::memory_order_relaxed) == before) {
        return total + (since != 0 ? now_ns - since : 0);
      }
    }
  }
  void Began(int64_t now_ns) {
    Write([&] { since_ns_.store(now_ns, std::memory_order_relaxed); });
  }
  void Ended(int64_t now_ns) {
    Write([&] {
      const int64_t since = since_ns_.load(std::memory_order_relaxed);
      if (since == 0) return;
      total_ns_.store(total_ns_.load(std::memory_order_relaxed) + now_ns - since,
                      std::memory_order_relaxed);
      since_ns_.store(0, std::memory_order_relaxed);
    });
  }

 private:
  // One writer (the connection's executor): the version is odd while it writes.
  template <typename Change>
  void Write(Change change) {
    const uint64_t v = version_.load(std::memory_order_relaxed);
    version_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    change();
    version_.store(v + 2, std::memory_order_release);
  }

  std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> total_ns_{0};
  std::atomic<int64_t> since_ns_{0};  // 0: not waiting now
};

}  // namespace pillar
