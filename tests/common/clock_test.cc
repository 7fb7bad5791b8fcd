#include "common/clock.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar {
namespace {

TEST(ClockTest, FormatsMicrosecondsInUtcAtAFixedWidth) {
  EXPECT_EQ(FormatUtcMicros(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatUtcMicros(1'796'083'200'000'123), "2026-12-01T00:00:00.000123Z");
  EXPECT_EQ(FormatUtcMicros(1'796'083'200'999'999), "2026-12-01T00:00:00.999999Z");
  // Before the epoch, the fraction still counts up from the second before.
  EXPECT_EQ(FormatUtcMicros(-1), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(FormatUtc(1'796'083'201), "2026-12-01T00:00:01Z");
}

// The per-thread cache of the seconds part follows the second asked for, in any order.
TEST(ClockTest, AppendsAfterWhatIsThereAndFollowsTheSecond) {
  std::string out = "time=";
  AppendUtcMicros(out, 1'796'083'200'000'001);
  AppendUtcMicros(out, 1'796'083'199'000'002);
  AppendUtcMicros(out, 1'796'083'200'000'003);
  EXPECT_EQ(out,
            "time=2026-12-01T00:00:00.000001Z2026-11-30T23:59:59.000002Z"
            "2026-12-01T00:00:00.000003Z");
}

}  // namespace
}  // namespace pillar
