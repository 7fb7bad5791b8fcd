#include "common/cancellation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace pillar {
namespace {

TEST(CancellationTest, CancelRunsTheStopKeptOnce) {
  Cancellation cancellation;
  int stops = 0;
  ASSERT_TRUE(cancellation.OnCancel([&stops] { ++stops; }));
  EXPECT_FALSE(cancellation.cancelled());
  cancellation.Cancel();
  cancellation.Cancel();
  EXPECT_EQ(stops, 1);
  EXPECT_TRUE(cancellation.cancelled());
}

TEST(CancellationTest, AStopAfterTheCancelIsRefusedNotRun) {
  Cancellation cancellation;
  cancellation.Cancel();
  bool ran = false;
  EXPECT_FALSE(cancellation.OnCancel([&ran] { ran = true; }));
  EXPECT_FALSE(ran);  // the caller, who may hold its own lock, ends the work itself
}

TEST(CancellationTest, ALaterStopReplacesAnEarlierOne) {
  Cancellation cancellation;
  int first = 0, second = 0;
  ASSERT_TRUE(cancellation.OnCancel([&first] { ++first; }));
  ASSERT_TRUE(cancellation.OnCancel([&second] { ++second; }));
  cancellation.Cancel();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
}

// The stop runs outside the object's lock: it may call back into it.
TEST(CancellationTest, TheStopMayReadTheCancellation) {
  Cancellation cancellation;
  bool seen = false;
  ASSERT_TRUE(cancellation.OnCancel([&] { seen = cancellation.cancelled(); }));
  cancellation.Cancel();
  EXPECT_TRUE(seen);
}

TEST(CancellationTest, RacingCancelsRunTheStopOnce) {
  for (int round = 0; round < 50; ++round) {
    Cancellation cancellation;
    std::atomic<int> stops{0};
    ASSERT_TRUE(cancellation.OnCancel([&stops] { stops.fetch_add(1); }));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back([&] { cancellation.Cancel(); });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(stops.load(), 1);
  }
}

}  // namespace
}  // namespace pillar
