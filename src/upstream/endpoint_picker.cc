#include "upstream/endpoint_picker.h"

#include <algorithm>

namespace pillar::upstream {
namespace {

constexpr double kLatencyFloorS = 1e-4;

// An endpoint not measured yet counts as the group's average, so that it gets tried as often as
// an average one: not always (an endpoint that never answers a usable reply would otherwise
// never be measured and win every draw), not never.
double Load(const Candidate& c, double unmeasured_s) {
  return double(c.outstanding + 1) *
         std::max(c.latency_s > 0 ? c.latency_s : unmeasured_s, kLatencyFloorS);
}

}  // namespace

const Candidate& EndpointPicker::Draw(const absl::InlinedVector<const Candidate*, 8>& group,
                                      int64_t total_weight) {
  int64_t pick = std::uniform_int_distribution<int64_t>(0, total_weight - 1)(rng_);
  for (const Candidate* c : group) {
    if (pick < c->weight) return *c;
    pick -= c->weight;
  }
  return *group.back();
}

std::optional<size_t> EndpointPicker::Pick(const Candidates& candidates) {
  if (candidates.empty()) return std::nullopt;
  int best = candidates.front().priority;
  for (const Candidate& c : candidates) best = std::min(best, c.priority);
  absl::InlinedVector<const Candidate*, 8> group;
  int64_t total_weight = 0;
  for (const Candidate& c : candidates) {
    if (c.priority != best) continue;
    group.push_back(&c);
    total_weight += std::max(c.weight, 1);
  }
  if (group.size() == 1) return group.front()->index;
  double measured_sum = 0;
  int measured = 0;
  for (const Candidate* c : group) {
    if (c->latency_s <= 0) continue;
    measured_sum += c->latency_s;
    ++measured;
  }
  const double unmeasured_s = measured > 0 ? measured_sum / measured : kLatencyFloorS;
  const Candidate& first = Draw(group, total_weight);
  const Candidate& second = Draw(group, total_weight);
  return (Load(second, unmeasured_s) < Load(first, unmeasured_s) ? second : first).index;
}

}  // namespace pillar::upstream
