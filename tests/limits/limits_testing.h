// Shared pieces of the limiter tests: a clock the test moves, and policies with one limit.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/clock.h"
#include "policy/policy.h"

namespace pillar::limits {

class FakeClock final : public Clock {
 public:
  int64_t MonotonicNanos() const override { return mono_ns.load(); }
  int64_t UnixMicros() const override { return unix_us.load(); }
  void Advance(int64_t ns) {
    mono_ns += ns;
    unix_us += ns / 1000;
  }
  std::atomic<int64_t> mono_ns{1'000'000'000'000};
  std::atomic<int64_t> unix_us{1'800'000'000'000'000};  // 2027-01-15T08:00:00Z
};

// A policy holding the given [[limit]] tables (and no rules).
inline std::shared_ptr<const policy::Policy> Limits(const std::string& limits) {
  auto p = policy::Policy::Parse("version = 1\n" + limits, "limits.toml");
  if (!p.ok()) std::abort();
  return *p;
}

}  // namespace pillar::limits
