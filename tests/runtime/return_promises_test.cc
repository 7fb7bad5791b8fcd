// The places a queue keeps for the callers it told to come back: a Retry-After that is kept
// under load that does not let up.
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
    told.push_back(promises.Promise(caller, 10 * kS, 4.0, 1));
  }
  EXPECT_EQ(told, (std::vector<int64_t>{1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(promises.outstanding(), 6);
  // The estimate is a floor: a caller told to wait at least 5 s is not told less.
  EXPECT_EQ(promises.Promise(7, 10 * kS, 4.0, 5), 5);
}

TEST(ReturnPromisesTest, ACallerBackAtItsTimeRedeemsOnceAndOnlyItsOwn) {
  ReturnPromises promises;
  ASSERT_EQ(promises.Promise(42, 10 * kS, 10.0, 2), 2);
  EXPECT_FALSE(promises.Redeem(42, 10 * kS + kS));          // too early
  EXPECT_FALSE(promises.Redeem(7, 12 * kS));                // someone else
  EXPECT_FALSE(promises.Redeem(0, 12 * kS));                // unknown callers never do
  EXPECT_TRUE(promises.Redeem(42, 12 * kS - 100'000'000));  // a little early is fine
  EXPECT_FALSE(promises.Redeem(42, 12 * kS));               // once
  EXPECT_EQ(promises.outstanding(), 0);
}

TEST(ReturnPromisesTest, AMissedPlaceLapsesAndIsNotKeptForever) {
  ReturnPromises promises;
  ASSERT_EQ(promises.Promise(42, 10 * kS, 10.0, 1), 1);
  EXPECT_FALSE(promises.Redeem(42, 15 * kS));  // 4 s late: gone
  EXPECT_EQ(promises.outstanding(), 0);
  // Callers that never come back are swept too.
  for (uint64_t caller = 1; caller <= 100; ++caller) promises.Promise(caller, 20 * kS, 1000.0, 1);
  EXPECT_EQ(promises.outstanding(), 100);
  promises.Redeem(999, 30 * kS);
  EXPECT_EQ(promises.outstanding(), 0);
}

TEST(ReturnPromisesTest, BoundedInTimeAndInNumber) {
  ReturnPromises promises({.share = 0.5, .max_wait_s = 3, .max_outstanding = 5});
  // 2 a second served: 1 place a second, up to 3 s out; then the estimate, unbooked.
  EXPECT_EQ(promises.Promise(1, 0, 2.0, 1), 1);
  EXPECT_EQ(promises.Promise(2, 0, 2.0, 1), 2);
  EXPECT_EQ(promises.Promise(3, 0, 2.0, 1), 3);
  EXPECT_EQ(promises.Promise(4, 0, 2.0, 1), 1);
  EXPECT_EQ(promises.outstanding(), 3);
  EXPECT_FALSE(promises.Redeem(4, kS));
  // Nothing measured, no caller: no place.
  EXPECT_EQ(promises.Promise(5, 0, 0.0, 2), 2);
  EXPECT_EQ(promises.Promise(0, 0, 2.0, 2), 2);
  ReturnPromises few({.max_outstanding = 2});
  few.Promise(1, 0, 1000.0, 1);
  few.Promise(2, 0, 1000.0, 1);
  few.Promise(3, 0, 1000.0, 1);
  EXPECT_EQ(few.outstanding(), 2);
}

TEST(ReturnPromisesTest, OneKeyManyClientsSharesItsPlacesByCount) {
  ReturnPromises promises;
  for (int i = 0; i < 3; ++i) promises.Promise(9, 0, 100.0, 1);
  int redeemed = 0;
  for (int i = 0; i < 5; ++i) redeemed += promises.Redeem(9, kS);
  EXPECT_EQ(redeemed, 3);
}

}  // namespace
}  // namespace pillar::runtime
