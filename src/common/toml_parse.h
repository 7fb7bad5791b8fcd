// Parses TOML text into a table, turning toml++'s exceptions (Debian builds it with them) into
// an absl::Status at this boundary, so no caller sees an exception.
//
//   absl::StatusOr<toml::table> table = ParseToml(text, "pillar.toml");
#pragma once

#include <toml++/toml.h>

#include <string_view>

#include "absl/status/statusor.h"

namespace pillar {

// InvalidArgument naming `source`, the line and column when the text is not valid TOML.
absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source);

}  // namespace pillar
