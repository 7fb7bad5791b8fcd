#include "common/clock.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>

namespace pillar {
namespace {

class RealClock final : public Clock {
 public:
  int64_t MonotonicNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t UnixMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock& SystemClock() {
  static RealClock clock;
  return clock;
}

std::string FormatUtc(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatUtcMicros(int64_t unix_micros) {
  std::string out;
  AppendUtcMicros(out, unix_micros);
  return out;
}

void AppendUtcMicros(std::string& out, int64_t unix_micros) {
  int64_t seconds = unix_micros / 1000000;
  int micros = static_cast<int>(unix_micros % 1000000);
  if (micros < 0) {
    micros += 1000000;
    --seconds;
  }
  // Audit records format one time each, many per second: the seconds part is cached per thread.
  thread_local int64_t cached_second = INT64_MIN;
  thread_local char cached[32];
  thread_local size_t cached_size = 0;
  if (seconds != cached_second) {
    std::time_t t = static_cast<std::time_t>(seconds);
    std::tm tm{};
    gmtime_r(&t, &tm);
    cached_size = std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_second = seconds;
  }
  out.append(cached, cached_size);
  char fraction[9] = {'.', '0', '0', '0', '0', '0', '0', 'Z', '\0'};
  for (int i = 6; i >= 1; --i, micros /= 10) fraction[i] = char('0' + micros % 10);
  out.append(fraction, 8);
}

}  // namespace pillar
