// A clock the test moves by hand: what replaces sleeping until a key expires, a quota period
// renews or a checkpoint falls due. Both readings start at fixed, far-from-zero values and move
// together.
//
//   FakeClock clock;
//   AuthenticateStage stage(authenticator, audit, clock);
//   clock.Advance(absl::Seconds(31));   // the key has expired; no sleep
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "common/clock.h"

namespace pillar::testing {

class FakeClock final : public Clock {
 public:
  int64_t MonotonicNanos() const override { return mono_ns.load(); }
  int64_t UnixMicros() const override { return unix_us.load(); }
  void Advance(int64_t ns) {
    mono_ns += ns;
    unix_us += ns / 1000;
  }
  void Advance(absl::Duration d) { Advance(absl::ToInt64Nanoseconds(d)); }

  std::atomic<int64_t> mono_ns{1'000'000'000'000};
  std::atomic<int64_t> unix_us{1'800'000'000'000'000};  // 2027-01-15T08:00:00Z
};

}  // namespace pillar::testing
