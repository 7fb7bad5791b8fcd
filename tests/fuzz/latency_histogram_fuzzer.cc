// Fuzzes the empirical latency histogram of a simulated model (latency_histogram.txt, a file of
// a model version): a parsed histogram draws only latencies within its bounds.
#include <cstdint>
#include <random>
#include <string_view>

#include "runtime/latency_histogram.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<pillar::runtime::LatencyHistogram> histogram =
      pillar::runtime::LatencyHistogram::Parse(
          std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!histogram.ok()) return 0;
  if (histogram->buckets() == 0 || histogram->total() == 0) __builtin_trap();
  std::mt19937_64 rng(size);
  for (int i = 0; i < 8; ++i) {
    const double ms = histogram->SampleMillis(rng);
    if (!(ms >= 0 && ms <= pillar::runtime::LatencyHistogram::kMaxMillis)) __builtin_trap();
  }
  return 0;
}
