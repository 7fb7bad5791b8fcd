#include "upstream/endpoint_picker.h"

#include <gtest/gtest.h>

namespace pillar::upstream {
namespace {

Candidate Make(size_t index, int priority, int weight, int64_t outstanding = 0,
               double latency_s = 0.001) {
  Candidate c;
  c.index = index;
  c.priority = priority;
  c.weight = weight;
  c.outstanding = outstanding;
  c.latency_s = latency_s;
  return c;
}

TEST(EndpointPickerTest, ALowerGroupServesOnlyWhenTheOneAboveHasNoCandidate) {
  EndpointPicker picker(1);
  for (int i = 0; i < 100; ++i) {
    EXPECT_NE(picker.Pick({Make(0, 2, 1), Make(1, 1, 1), Make(2, 1, 1)}), 0u);
  }
  EXPECT_EQ(picker.Pick({Make(0, 2, 1), Make(3, 3, 1)}), 0u);
  EXPECT_EQ(picker.Pick({}), std::nullopt);
}

TEST(EndpointPickerTest, EquallyLoadedEndpointsShareByWeight) {
  EndpointPicker picker(2);
  int heavy = 0;
  constexpr int kPicks = 20'000;
  for (int i = 0; i < kPicks; ++i) heavy += picker.Pick({Make(0, 1, 3), Make(1, 1, 1)}) == 0u;
  EXPECT_NEAR(double(heavy) / kPicks, 0.75, 0.02);
}

TEST(EndpointPickerTest, TheLessLoadedOfTwoDrawsWins) {
  EndpointPicker picker(3);
  int busy = 0, slow = 0;
  constexpr int kPicks = 20'000;
  for (int i = 0; i < kPicks; ++i) {
    busy += picker.Pick({Make(0, 1, 1, /*outstanding=*/9), Make(1, 1, 1, 0)}) == 0u;
    slow += picker.Pick({Make(0, 1, 1, 0, /*latency_s=*/0.5), Make(1, 1, 1, 0, 0.01)}) == 0u;
  }
  // Chosen only when drawn twice: a quarter of the time.
  EXPECT_NEAR(double(busy) / kPicks, 0.25, 0.02);
  EXPECT_NEAR(double(slow) / kPicks, 0.25, 0.02);
}

}  // namespace
}  // namespace pillar::upstream
