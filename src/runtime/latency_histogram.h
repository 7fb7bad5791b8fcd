// An empirical latency distribution: the histogram a simulated model draws its latency from
// (platform = "simulated", latency = "empirical"), read from the version's signed file
// latency_histogram.txt. One bucket per line, the bucket's upper bound in milliseconds and how
// many observations fell in it; bounds strictly increase; '#' starts a comment:
//
//   # upper_ms  count
//   5           120
//   10          300
//   100         5
//
// A draw picks a bucket in proportion to its count, then a point uniformly within it (from the
// bucket before's bound, or 0). Export one from any tool that buckets latencies (Prometheus'
// histogram buckets, minus the cumulative sums).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::runtime {

class LatencyHistogram {
 public:
  static constexpr size_t kMaxBuckets = 10'000;
  static constexpr double kMaxMillis = 3'600'000;  // an hour

  // InvalidArgument naming `source` and the line of the first problem.
  [[nodiscard]] static absl::StatusOr<LatencyHistogram> Parse(std::string_view text,
                                                              std::string_view source);

  double SampleMillis(std::mt19937_64& rng) const;

  size_t buckets() const { return upper_ms_.size(); }
  uint64_t total() const { return cumulative_.back(); }

 private:
  std::vector<double> upper_ms_;
  std::vector<uint64_t> cumulative_;  // counts up to and including each bucket
};

}  // namespace pillar::runtime
