// Parsing of the small values the command line takes: names, "name=v1,v2" attributes and
// durations such as "90d".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::app {

inline constexpr std::string_view kNameRule =
    "names hold 1 to 64 letters, digits, '-', '_', '.', ':' or '/'";

// Tenants, roles and attribute names: no separators, nothing a log or policy would misread.
bool IsName(std::string_view text);

// "clearances=public,internal" (repeatable) into a map; values may not hold ',' ';' or '='.
[[nodiscard]] absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseAttributes(
    const std::vector<std::string>& items);

// "45s", "30m", "12h", "90d" into seconds (positive, at most ten years).
[[nodiscard]] absl::StatusOr<int64_t> ParseDurationSeconds(std::string_view text);

}  // namespace pillar::app
