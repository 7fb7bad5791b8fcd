#include "common/wakeup.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace pillar {
namespace {

using Steady = std::chrono::steady_clock;

TEST(WakeupTest, ANotificationGivenBeforeTheWaitIsKeptAndTakenOnce) {
  Wakeup wakeup;
  wakeup.Notify();
  const auto start = Steady::now();
  EXPECT_TRUE(wakeup.Wait(absl::Seconds(30)));
  EXPECT_LT(Steady::now() - start, std::chrono::seconds(10));
  // Taken: the next wait runs to its timeout, give or take absl's timed wait, which may end a
  // fraction of a millisecond early on the steady clock (CI: 49.6 ms of 50).
  const auto again = Steady::now();
  EXPECT_TRUE(wakeup.Wait(absl::Milliseconds(100)));
  EXPECT_GE(Steady::now() - again, std::chrono::milliseconds(90));
}

TEST(WakeupTest, NotifyEndsAWaitInProgress) {
  Wakeup wakeup;
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wakeup.Notify();
  });
  const auto start = Steady::now();
  EXPECT_TRUE(wakeup.Wait(absl::Seconds(30)));
  EXPECT_LT(Steady::now() - start, std::chrono::seconds(10));
  notifier.join();
}

TEST(WakeupTest, StopEndsThisWaitAndEveryLaterOne) {
  Wakeup wakeup;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wakeup.Stop();
  });
  const auto start = Steady::now();
  EXPECT_FALSE(wakeup.Wait(absl::Seconds(30)));
  stopper.join();
  EXPECT_FALSE(wakeup.Wait(absl::Seconds(30)));
  EXPECT_LT(Steady::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace pillar
