// Chooses the endpoint for an attempt among those that may take it (Envoy's least-request
// balancing with Azure API Management's priority groups):
// - the group with the best priority (the lowest number) that has a candidate: a lower group
//   gets traffic only when every endpoint above it is out, ejected or already tried;
// - within it, the power of two choices: two endpoints drawn in proportion to their weights, and
//   the one with the lower load wins, load being (attempts in flight + 1) x its recent latency; a
//   tie goes to the first drawn, so equally loaded endpoints share the traffic by weight.
//
//   EndpointPicker picker(seed);
//   std::optional<size_t> chosen = picker.Pick(candidates);
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace pillar::upstream {

struct Candidate {
  size_t index = 0;  // the caller's, returned by Pick
  int priority = 1;
  int weight = 1;
  int64_t outstanding = 0;
  double latency_s = 0;  // recent latency (an average); 0 when not measured yet
};

// Inline up to 8: an attempt considers its endpoints on the request's path, and most backends
// have a few.
using Candidates = absl::InlinedVector<Candidate, 8>;

class EndpointPicker {
 public:
  explicit EndpointPicker(uint64_t seed) : rng_(seed) {}

  // The index of the chosen candidate, or none when there is none.
  std::optional<size_t> Pick(const Candidates& candidates);

 private:
  // A candidate of `group` drawn in proportion to its weight.
  const Candidate& Draw(const absl::InlinedVector<const Candidate*, 8>& group,
                        int64_t total_weight);

  std::mt19937_64 rng_;
};

}  // namespace pillar::upstream
