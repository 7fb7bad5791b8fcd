// The places a queue keeps for the callers it told to come back: a Retry-After that is kept
// under load that does not let up, and that a caller cannot turn against others.
#include "runtime/return_promises.h"

#include <gtest/gtest.h>

namespace pillar::runtime {
namespace {

constexpr int64_t kS = 1'000'000'000;

TEST(ReturnPromisesTest, EachSecondPromisesOnlyItsShareOfCapacity) {
  ReturnPromises promises;  // half of each second
  // 4 a second served: 2 places a second. Six callers shed at t=10 s: two come back in 1 s, two in
  // 2 s, two in 3 s.
  std::vector<int64_t> told;
  for (uint64_t caller = 1; caller <= 6; ++caller) {
    told.push_back(promises.Promise(caller, caller, 10 * kS, 4.0, 1));
  }
  EXPECT_EQ(told, (std::vector<int64_t>{1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(promises.outstanding(), 6);
  // The estimate is a floor: a caller told to wait at least 5 s is not told less.
  EXPECT_EQ(promises.Promise(7, 7, 10 * kS, 4.0, 5), 5);
}

TEST(ReturnPromisesTest, ACallerBackAtItsTimeRedeemsOnceAndOnlyItsOwn) {
  ReturnPromises promises;
  ASSERT_EQ(promises.Promise(42, 1, 10 * kS, 10.0, 2), 2);
  EXPECT_FALSE(promises.Redeem(42, 10 * kS + kS));          // too early
  EXPECT_FALSE(promises.Redeem(7, 12 * kS));                // someone else
  EXPECT_FALSE(promises.Redeem(0, 12 * kS));                // unknown callers never do
  EXPECT_TRUE(promises.Redeem(42, 12 * kS - 100'000'000));  // a little early is fine
  EXPECT_FALSE(promises.Redeem(42, 12 * kS));               // once
  EXPECT_EQ(promises.outstanding(), 0);
}

TEST(ReturnPromisesTest, AMissedPlaceLapsesAndIsNotKeptForever) {
  ReturnPromises promises;
  ASSERT_EQ(promises.Promise(42, 1, 10 * kS, 10.0, 1), 1);
  EXPECT_FALSE(promises.Redeem(42, 15 * kS));  // 4 s late: gone
  EXPECT_EQ(promises.outstanding(), 0);
  // Callers that never come back are swept too.
  for (uint64_t caller = 1; caller <= 100; ++caller) {
    promises.Promise(caller, caller, 20 * kS, 1000.0, 1);
  }
  EXPECT_EQ(promises.outstanding(), 100);
  promises.Redeem(999, 30 * kS);
  EXPECT_EQ(promises.outstanding(), 0);
}

TEST(ReturnPromisesTest, BoundedInTimeAndInNumber) {
  ReturnPromises promises({.share = 0.5, .max_wait_s = 3, .max_outstanding = 5});
  // 2 a second served: 1 place a second, up to 3 s out; then the estimate, unbooked.
  EXPECT_EQ(promises.Promise(1, 1, 0, 2.0, 1), 1);
  EXPECT_EQ(promises.Promise(2, 2, 0, 2.0, 1), 2);
  EXPECT_EQ(promises.Promise(3, 3, 0, 2.0, 1), 3);
  EXPECT_EQ(promises.Promise(4, 4, 0, 2.0, 1), 1);
  EXPECT_EQ(promises.outstanding(), 3);
  EXPECT_FALSE(promises.Redeem(4, kS));
  // Nothing measured, no caller: no place.
  EXPECT_EQ(promises.Promise(5, 5, 0, 0.0, 2), 2);
  EXPECT_EQ(promises.Promise(0, 5, 0, 2.0, 2), 2);
  ReturnPromises few({.max_outstanding = 2});
  few.Promise(1, 1, 0, 1000.0, 1);
  few.Promise(2, 2, 0, 1000.0, 1);
  few.Promise(3, 3, 0, 1000.0, 1);
  EXPECT_EQ(few.outstanding(), 2);
}

// Found by the second attacker review: one connection, or one principal with many, took every
// place for a minute, so callers who obeyed were refused again.
TEST(ReturnPromisesTest, NoCallerOrPrincipalTakesEveryPlace) {
  ReturnPromises promises;
  // 10 a second served: 5 places a second; a principal may hold two seconds' worth, 10.
  ASSERT_EQ(promises.Promise(1, 77, 0, 10.0, 1), 1);
  EXPECT_EQ(promises.outstanding(), 1);
  promises.Promise(1, 77, 0, 10.0, 1);  // the same connection again: no second place
  EXPECT_EQ(promises.outstanding(), 1);
  for (uint64_t connection = 2; connection <= 50; ++connection) {
    promises.Promise(connection, 77, 0, 10.0, 1);
  }
  EXPECT_EQ(promises.outstanding(), 10);
  // Someone else still gets a place, in the first second that has one.
  EXPECT_EQ(promises.Promise(1000, 88, 0, 10.0, 1), 3);
  EXPECT_EQ(promises.outstanding(), 11);
}

// Places booked by callers who never come back stop counting as load in others' estimates.
TEST(ReturnPromisesTest, PlacesNobodyTakesStopPassingForLoad) {
  ReturnPromises promises;
  for (uint64_t caller = 1; caller <= 40; ++caller) promises.Promise(caller, caller, 0, 100.0, 1);
  EXPECT_EQ(promises.PendingBefore(kS), 40);  // nothing missed yet: every place counts
  promises.Redeem(999, 4 * kS);               // every one of them lapsed
  for (uint64_t caller = 101; caller <= 140; ++caller) {
    promises.Promise(caller, caller, 4 * kS, 100.0, 1);
  }
  EXPECT_LE(promises.PendingBefore(5 * kS), 6);  // 40 places, few of which are likely taken
  // Callers who do come back bring it up again.
  for (uint64_t caller = 101; caller <= 140; ++caller) EXPECT_TRUE(promises.Redeem(caller, 5 * kS));
  for (uint64_t caller = 201; caller <= 240; ++caller) {
    promises.Promise(caller, caller, 5 * kS, 100.0, 1);
  }
  EXPECT_GE(promises.PendingBefore(6 * kS), 25);
}

}  // namespace
}  // namespace pillar::runtime
