// Shared pieces of the limiter tests: a clock the test moves (tests/testing/fake_clock.h), and
// policies with one limit.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/clock.h"
#include "policy/policy.h"
#include "testing/fake_clock.h"

namespace pillar::limits {

using ::pillar::testing::FakeClock;

// A policy holding the given [[limit]] tables (and no rules).
inline std::shared_ptr<const policy::Policy> Limits(const std::string& limits) {
  auto p = policy::Policy::Parse("version = 1\n" + limits, "limits.toml");
  if (!p.ok()) std::abort();
  return *p;
}

}  // namespace pillar::limits
