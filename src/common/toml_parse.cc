#include "common/toml_parse.h"

#include <string>

#include "common/strings.h"

namespace pillar {

absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, std::string(source));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(StrCat(source, ":", error.source().begin.line, ":",
                                             error.source().begin.column, ": ",
                                             error.description()));
  }
}

}  // namespace pillar
