// The highest generation of each model's signed aliases file that this deployment has seen,
// kept in the state store: a server refuses an aliases file older than that (an earlier signed
// file put back by someone who can write the store but holds no key) or its removal, and the
// CLI numbers the next move above it. See models::AliasTrust::admit_generation.
//
//   AliasGenerations generations(state_store);
//   trust.admit_generation = [&](std::string_view m, int64_t g) { return generations.Admit(m, g); };
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "state/state_store.h"

namespace pillar::app {

class AliasGenerations {
 public:
  explicit AliasGenerations(state::StateStore& store) : store_(store) {}

  // OK when `generation` is at least the highest seen for `model`, which it then becomes.
  [[nodiscard]] absl::Status Admit(std::string_view model, int64_t generation);
  // The highest generation seen for `model` (0: none).
  [[nodiscard]] absl::StatusOr<int64_t> Highest(std::string_view model);

 private:
  state::StateStore& store_;
  absl::Mutex mu_;
  // What the store last confirmed: a scan every second asks about every model, and only a
  // generation above this needs a write.
  std::map<std::string, int64_t, std::less<>> confirmed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar::app
