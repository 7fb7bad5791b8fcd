// Which versions of a model are served, as in Triton: the latest N, all, or a specific list.
//
//   absl::StatusOr<VersionPolicy> p = VersionPolicy::Parse("latest:2");
//   std::vector<int64_t> served = p->Select({1, 2, 3});  // {2, 3}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::models {

class VersionPolicy {
 public:
  enum class Kind { kLatest, kAll, kSpecific };

  // "latest" (= latest:1), "latest:N", "all", or "specific:1,3".
  [[nodiscard]] static absl::StatusOr<VersionPolicy> Parse(std::string_view text);
  static VersionPolicy Latest(int count = 1) { return VersionPolicy(Kind::kLatest, count, {}); }

  // The versions to serve from `available`, ascending.
  std::vector<int64_t> Select(std::vector<int64_t> available) const;
  std::string ToString() const;

 private:
  VersionPolicy(Kind kind, int latest, std::vector<int64_t> specific)
      : kind_(kind), latest_(latest), specific_(std::move(specific)) {}

  Kind kind_;
  int latest_;
  std::vector<int64_t> specific_;
};

}  // namespace pillar::models
