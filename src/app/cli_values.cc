#include "app/cli_values.h"

#include <cctype>

#include "common/strings.h"

namespace pillar::app {

bool IsName(std::string_view text) {
  if (text.empty() || text.size() > 64) return false;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != ':' && c != '/') {
      return false;
    }
  }
  return true;
}

[[nodiscard]] absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseAttributes(
    const std::vector<std::string>& items) {
  std::map<std::string, std::vector<std::string>> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("attribute '", item, "' must be name=value[,value]"));
    }
    std::string name = item.substr(0, eq);
    if (!IsName(name)) {
      return absl::InvalidArgumentError(StrCat("attribute name '", name, "': ", kNameRule));
    }
    std::vector<std::string> values;
    for (std::string_view v : Split(std::string_view(item).substr(eq + 1), ',')) {
      if (v.empty() || v.size() > 256 || v.find_first_of(";=") != std::string_view::npos) {
        return absl::InvalidArgumentError(
            StrCat("attribute '", name, "': values are 1 to 256 characters without ';' or '='"));
      }
      values.emplace_back(v);
    }
    out[name] = std::move(values);
  }
  return out;
}

[[nodiscard]] absl::StatusOr<int64_t> ParseDurationSeconds(std::string_view text) {
  int64_t n = 0;
  if (text.size() < 2 || !ParseInt(text.substr(0, text.size() - 1), &n) || n <= 0) {
    return absl::InvalidArgumentError(
        StrCat("duration '", text, "' must be a positive number and a unit: s, m, h or d"));
  }
  int64_t unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1;
      break;
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    default:
      return absl::InvalidArgumentError(StrCat("duration '", text, "': unit must be s, m, h or d"));
  }
  constexpr int64_t kTenYears = 10LL * 366 * 86400;
  if (n > kTenYears / unit)
    return absl::InvalidArgumentError(StrCat("duration '", text, "' is too long"));
  return n * unit;
}

}  // namespace pillar::app
