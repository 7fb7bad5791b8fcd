#include "app/alias_generations.h"

#include "common/strings.h"

namespace pillar::app {
namespace {

std::string MarkName(std::string_view model) { return StrCat("aliases/", model); }

}  // namespace

absl::Status AliasGenerations::Admit(std::string_view model, int64_t generation) {
  absl::MutexLock lock(&mu_);
  auto known = confirmed_.find(model);
  if (known == confirmed_.end() || generation > known->second) {
    absl::StatusOr<int64_t> stored = store_.RaiseHighWater(MarkName(model), generation);
    if (!stored.ok()) {
      return absl::UnavailableError(
          StrCat("cannot check the aliases' generation in the state store: ",
                 stored.status().message()));
    }
    known = confirmed_.insert_or_assign(std::string(model), *stored).first;
  }
  if (generation >= known->second) return absl::OkStatus();
  if (generation == 0) {
    return absl::PermissionDeniedError(
        StrCat("the aliases file is gone, but generation ", known->second,
               " was seen before; it is kept in service as it was"));
  }
  return absl::PermissionDeniedError(
      StrCat("generation ", generation, " is older than generation ", known->second,
             " seen before (an earlier file put back?); it is refused and the aliases in "
             "service are kept"));
}

absl::StatusOr<int64_t> AliasGenerations::Highest(std::string_view model) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> stored = store_.RaiseHighWater(MarkName(model), 0);
  if (stored.ok()) confirmed_.insert_or_assign(std::string(model), *stored);
  return stored;
}

}  // namespace pillar::app
