// WaitMeter: how long something has waited, summed over its waits, a wait in progress counted
// to the moment asked. Written by one thread, read from any (atomics): an HTTP connection counts
// the time its streamed writes wait for the client's socket (http/session.cc), and a stream's
// producer, on another thread, weighs the client's share of the stream's time with it.
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
    const int64_t since = since_ns_.load(std::memory_order_acquire);
    return total_ns_.load(std::memory_order_acquire) + (since != 0 ? now_ns - since : 0);
  }
  void Began(int64_t now_ns) { since_ns_.store(now_ns, std::memory_order_release); }
  void Ended(int64_t now_ns) {
    const int64_t since = since_ns_.exchange(0, std::memory_order_acq_rel);
    if (since != 0) total_ns_.fetch_add(now_ns - since, std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> total_ns_{0};
  std::atomic<int64_t> since_ns_{0};  // 0: not waiting now
};

}  // namespace pillar
