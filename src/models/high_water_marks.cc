#include "models/high_water_marks.h"

#include "common/strings.h"

namespace pillar::models {

absl::StatusOr<int64_t> HighWaterMarks::Raise(const std::string& name, int64_t value) {
  auto known = confirmed_.find(name);
  if (known != confirmed_.end() && value <= known->second) return known->second;
  absl::StatusOr<int64_t> stored = store_.RaiseHighWater(name, value);
  if (!stored.ok()) {
    return absl::UnavailableError(
        StrCat("cannot read or raise ", name, " in the state store: ", stored.status().message()));
  }
  confirmed_.insert_or_assign(name, *stored);
  return *stored;
}

absl::Status HighWaterMarks::Admit(std::string_view model, int64_t generation) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> highest = Raise(StrCat("aliases/", model), generation);
  if (!highest.ok()) return highest.status();
  if (generation >= *highest) return absl::OkStatus();
  if (generation == 0) {
    return absl::PermissionDeniedError(StrCat("the aliases file is gone, but generation ", *highest,
                                              " was seen before; it is kept in service as it was"));
  }
  return absl::PermissionDeniedError(
      StrCat("generation ", generation, " is older than generation ", *highest,
             " seen before (an earlier file put back?); it is refused and the aliases in "
             "service are kept"));
}

absl::StatusOr<int64_t> HighWaterMarks::Highest(std::string_view model) {
  absl::MutexLock lock(&mu_);
  confirmed_.erase(StrCat("aliases/", model));  // another process may have raised it
  return Raise(StrCat("aliases/", model), 0);
}

absl::Status HighWaterMarks::NoteVersion(std::string_view model, int64_t version) {
  absl::MutexLock lock(&mu_);
  return Raise(StrCat("versions/", model), version).status();
}

absl::StatusOr<int64_t> HighWaterMarks::HighestVersion(std::string_view model) {
  absl::MutexLock lock(&mu_);
  confirmed_.erase(StrCat("versions/", model));
  return Raise(StrCat("versions/", model), 0);
}

}  // namespace pillar::models
