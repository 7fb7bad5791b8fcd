// How often to checkpoint, from what a checkpoint costs and how often the job fails
// (R-PERF-6): Young's first-order optimum sqrt(2 C M), and Daly's higher-order one, which stays
// right when the cost is not small against the mean time between failures.
//
//   double every_s = DalyInterval(/*cost_s=*/12, /*mtbf_s=*/24 * 3600);   // about 1,500 s
#pragma once

#include <cmath>

namespace pillar::ckpt {

// Young (1974): the interval that minimises expected lost time, to first order.
inline double YoungInterval(double cost_s, double mtbf_s) {
  return std::sqrt(2.0 * cost_s * mtbf_s);
}

// Daly (2006), equation (37): for C < 2M, sqrt(2CM) [1 + (1/3) sqrt(C/2M) + (1/9)(C/2M)] - C;
// otherwise M.
inline double DalyInterval(double cost_s, double mtbf_s) {
  if (cost_s >= 2.0 * mtbf_s) return mtbf_s;
  const double r = cost_s / (2.0 * mtbf_s);
  return std::sqrt(2.0 * cost_s * mtbf_s) * (1.0 + std::sqrt(r) / 3.0 + r / 9.0) - cost_s;
}

// The fraction of time spent checkpointing and redoing lost work at interval `t`, to first
// order: C/t + t/(2M).
inline double ExpectedOverhead(double interval_s, double cost_s, double mtbf_s) {
  return cost_s / interval_s + interval_s / (2.0 * mtbf_s);
}

}  // namespace pillar::ckpt
