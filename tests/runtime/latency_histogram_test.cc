#include "runtime/latency_histogram.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pillar::runtime {
namespace {

TEST(LatencyHistogramTest, ParsesBucketsCommentsAndBlankLines) {
  absl::StatusOr<LatencyHistogram> h =
      LatencyHistogram::Parse("# upper_ms count\n5 120\n\n10\t300  # busy\r\n100 5\n", "h.txt");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->buckets(), 3u);
  EXPECT_EQ(h->total(), 425u);
}

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<LatencyHistogram> h = LatencyHistogram::Parse(text, "h.txt");
  EXPECT_FALSE(h.ok()) << text;
  return std::string(h.status().message());
}

TEST(LatencyHistogramTest, NamesTheLineOfEachProblem) {
  EXPECT_EQ(ErrorOf("5 1\n5 2\n"), "h.txt:2: bucket bounds must strictly increase");
  EXPECT_EQ(ErrorOf("5\n"),
            "h.txt:1: expected two fields: a bucket's upper bound in milliseconds and its count");
  EXPECT_EQ(ErrorOf("5 1 2\n"),
            "h.txt:1: expected two fields: a bucket's upper bound in milliseconds and its count");
  EXPECT_NE(ErrorOf("1 1\n-5 1\n").find("h.txt:2: '-5' is not a bound"), std::string::npos);
  EXPECT_NE(ErrorOf("nan 1\n").find("'nan' is not a bound"), std::string::npos);
  EXPECT_NE(ErrorOf("inf 1\n").find("'inf' is not a bound"), std::string::npos);
  EXPECT_NE(ErrorOf("3600001 1\n").find("is not a bound"), std::string::npos);
  EXPECT_NE(ErrorOf("5 -1\n").find("'-1' is not a count"), std::string::npos);
  EXPECT_NE(ErrorOf("5 1.5\n").find("'1.5' is not a count"), std::string::npos);
  EXPECT_NE(ErrorOf("5 281474976710657\n").find("is not a count"), std::string::npos);
  EXPECT_EQ(ErrorOf(""), "h.txt: no bucket has a count above 0");
  EXPECT_EQ(ErrorOf("5 0\n10 0\n"), "h.txt: no bucket has a count above 0");
  std::string many;
  for (int i = 1; i <= 10'001; ++i) many += std::to_string(i) + " 1\n";
  EXPECT_EQ(ErrorOf(many), "h.txt:10001: more than 10000 buckets");
}

TEST(LatencyHistogramTest, DrawsEachBucketInProportionAndNeverAnEmptyOne) {
  absl::StatusOr<LatencyHistogram> h = LatencyHistogram::Parse("10 1\n20 0\n30 3\n", "h.txt");
  ASSERT_TRUE(h.ok()) << h.status();
  std::mt19937_64 rng(7);
  int first = 0, third = 0;
  constexpr int kDraws = 40'000;
  for (int i = 0; i < kDraws; ++i) {
    const double ms = h->SampleMillis(rng);
    ASSERT_GE(ms, 0);
    ASSERT_LE(ms, 30);
    ASSERT_FALSE(ms > 10 && ms < 20) << ms << " is in the empty bucket";
    (ms <= 10 ? first : third)++;
  }
  // 1:3, with a margin of many standard deviations (sd of the share ~ 0.002).
  EXPECT_NEAR(double(first) / kDraws, 0.25, 0.02);
  EXPECT_NEAR(double(third) / kDraws, 0.75, 0.02);
}

}  // namespace
}  // namespace pillar::runtime
