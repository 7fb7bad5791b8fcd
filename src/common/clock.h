// Time sources behind an interface so tests can inject a fake clock.
//
//   Clock& clock = SystemClock();
//   int64_t start = clock.MonotonicNanos();
// Implementations must be safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>

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

// "2026-11-30T00:00:00Z": RFC 3339 in UTC, to the second, for times people and clients read.
std::string FormatUtc(int64_t unix_seconds);
// "2026-11-30T00:00:00.000123Z": the same to the microsecond, fixed width, so that such times
// sort as text (audit records).
std::string FormatUtcMicros(int64_t unix_micros);
// The same, appended to `out` (no string of its own: audit records format one each).
void AppendUtcMicros(std::string& out, int64_t unix_micros);

}  // namespace pillar
