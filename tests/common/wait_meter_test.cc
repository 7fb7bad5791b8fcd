#include "common/wait_meter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace pillar {
namespace {

TEST(WaitMeterTest, SumsTheWaitsAndCountsOneInProgressToNow) {
  WaitMeter meter;
  EXPECT_EQ(meter.nanos(100), 0);
  meter.Began(100);
  EXPECT_EQ(meter.nanos(130), 30);
  meter.Ended(150);
  EXPECT_EQ(meter.nanos(1000), 50);
  meter.Ended(2000);  // no wait in progress: nothing added
  EXPECT_EQ(meter.nanos(3000), 50);
  meter.Began(3000);
  meter.Ended(3007);
  EXPECT_EQ(meter.nanos(9000), 57);
}

// Found by review helper-107: a reader between a wait's end and the sum's update counted that
// wait twice. Each reading here must be one the writer's sequence passes through: i waits of
// 10 ns done, or i done and the next in progress (started at 1000 (i + 1)), read at kNow.
TEST(WaitMeterTest, AReaderBesideTheWriterSeesOnlyStatesTheWriterPassedThrough) {
  WaitMeter meter;
  constexpr int64_t kNow = int64_t{1} << 40;
  constexpr int64_t kWaits = 2'000'000;
  std::atomic<bool> reading{false};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!reading.load()) std::this_thread::yield();  // the two side by side
    for (int64_t i = 1; i <= kWaits; ++i) {  // a start of 0 is no wait (the meter's mark)
      meter.Began(1000 * i);
      meter.Ended(1000 * i + 10);
    }
    done.store(true);
  });
  int64_t impossible = 0;
  int64_t reads = 0;
  while (!done.load() || reads < 1000) {
    reading.store(true);
    const int64_t r = meter.nanos(kNow);
    ++reads;
    const bool between = r <= 10 * kWaits && r % 10 == 0;
    // i done and the next in progress: 10 i + kNow - 1000 (i + 1) = kNow - 1000 - 990 i.
    const bool during =
        r > 10 * kWaits && (kNow - 1000 - r) % 990 == 0 && (kNow - 1000 - r) / 990 < kWaits;
    if (!between && !during) ++impossible;
  }
  writer.join();
  EXPECT_EQ(impossible, 0) << "of " << reads << " readings";
  EXPECT_EQ(meter.nanos(kNow), 10 * kWaits);
}

}  // namespace
}  // namespace pillar
