#include "models/version_policy.h"

#include <algorithm>

#include "common/strings.h"

namespace pillar::models {

absl::StatusOr<VersionPolicy> VersionPolicy::Parse(std::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(StrCat(
        "version policy '", text, "' is not one of latest, latest:N, all, specific:V[,V...]"));
  };
  if (text == "all") return VersionPolicy(Kind::kAll, 0, {});
  if (text == "latest") return Latest(1);
  if (text.starts_with("latest:")) {
    int n;
    if (!ParseInt(text.substr(7), &n) || n < 1) return invalid();
    return Latest(n);
  }
  if (text.starts_with("specific:")) {
    std::vector<int64_t> versions;
    for (std::string_view part : Split(text.substr(9), ',')) {
      int64_t v;
      if (!ParseInt(part, &v) || v < 1) return invalid();
      versions.push_back(v);
    }
    std::sort(versions.begin(), versions.end());
    return VersionPolicy(Kind::kSpecific, 0, std::move(versions));
  }
  return invalid();
}

std::vector<int64_t> VersionPolicy::Select(std::vector<int64_t> available) const {
  std::sort(available.begin(), available.end());
  switch (kind_) {
    case Kind::kAll:
      return available;
    case Kind::kLatest:
      if (available.size() > static_cast<size_t>(latest_)) {
        available.erase(available.begin(), available.end() - latest_);
      }
      return available;
    case Kind::kSpecific: {
      std::vector<int64_t> chosen;
      for (int64_t v : available) {
        if (std::binary_search(specific_.begin(), specific_.end(), v)) chosen.push_back(v);
      }
      return chosen;
    }
  }
  return {};
}

std::string VersionPolicy::ToString() const {
  switch (kind_) {
    case Kind::kAll:
      return "all";
    case Kind::kLatest:
      return StrCat("latest:", latest_);
    case Kind::kSpecific:
      return StrCat("specific:", JoinInts(specific_, ","));
  }
  return "";
}

}  // namespace pillar::models
