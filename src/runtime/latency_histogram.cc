#include "runtime/latency_histogram.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/strings.h"

namespace pillar::runtime {
namespace {

// The total of all counts stays far below 2^64, so the cumulative sums cannot overflow.
constexpr uint64_t kMaxCount = uint64_t{1} << 48;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Splits `line` at its first run of blanks.
bool SplitFields(std::string_view line, std::string_view& first, std::string_view& second) {
  const size_t blank = line.find_first_of(" \t");
  if (blank == std::string_view::npos) return false;
  first = line.substr(0, blank);
  second = Trim(line.substr(blank));
  return !second.empty() && second.find_first_of(" \t") == std::string_view::npos;
}

}  // namespace

absl::StatusOr<LatencyHistogram> LatencyHistogram::Parse(std::string_view text,
                                                         std::string_view source) {
  LatencyHistogram histogram;
  uint64_t total = 0;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    auto error = [&](std::string_view what) {
      return absl::InvalidArgumentError(StrCat(source, ":", line_number, ": ", what));
    };
    std::string_view bound_text, count_text;
    if (!SplitFields(line, bound_text, count_text)) {
      return error("expected two fields: a bucket's upper bound in milliseconds and its count");
    }
    double bound = 0;
    auto [bound_end, bound_error] =
        std::from_chars(bound_text.data(), bound_text.data() + bound_text.size(), bound);
    if (bound_error != std::errc() || bound_end != bound_text.data() + bound_text.size() ||
        !std::isfinite(bound) || bound <= 0 || bound > kMaxMillis) {
      return error(
          StrCat("'", bound_text, "' is not a bound in (0, ", int64_t(kMaxMillis), "] ms"));
    }
    if (!histogram.upper_ms_.empty() && bound <= histogram.upper_ms_.back()) {
      return error("bucket bounds must strictly increase");
    }
    uint64_t count = 0;
    auto [count_end, count_error] =
        std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (count_error != std::errc() || count_end != count_text.data() + count_text.size() ||
        count > kMaxCount) {
      return error(StrCat("'", count_text, "' is not a count (a whole number up to 2^48)"));
    }
    if (histogram.upper_ms_.size() == kMaxBuckets) {
      return error(StrCat("more than ", kMaxBuckets, " buckets"));
    }
    total += count;
    histogram.upper_ms_.push_back(bound);
    histogram.cumulative_.push_back(total);
  }
  if (total == 0) {
    return absl::InvalidArgumentError(StrCat(source, ": no bucket has a count above 0"));
  }
  return histogram;
}

double LatencyHistogram::SampleMillis(std::mt19937_64& rng) const {
  const uint64_t pick = std::uniform_int_distribution<uint64_t>(0, total() - 1)(rng);
  // The first bucket whose cumulative count exceeds the pick: empty buckets are never chosen.
  const size_t i =
      size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), pick) - cumulative_.begin());
  const double lower = i == 0 ? 0.0 : upper_ms_[i - 1];
  return std::uniform_real_distribution<double>(lower, upper_ms_[i])(rng);
}

}  // namespace pillar::runtime
