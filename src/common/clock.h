// Time sources behind an interface so tests can inject a fake clock.
//
//   Clock& clock = SystemClock();
//   int64_t start = clock.MonotonicNanos();
// Implementations must be safe to call from any thread.
#pragma once

#include <cstdint>

namespace pillar {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time for durations; never goes backwards.
  virtual int64_t MonotonicNanos() const = 0;
  // Wall-clock time for records people read (audit, key creation).
  virtual int64_t UnixMicros() const = 0;
};

// The process-wide real clock.
Clock& SystemClock();

}  // namespace pillar
