#include "common/toml_parse.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "common/strings.h"

namespace pillar {

std::string ResolvePath(const std::string& base, const std::string& path) {
  if (path.empty() || path == "-" || base.empty() || std::filesystem::path(path).is_absolute())
    return path;
  return (std::filesystem::path(base) / path).lexically_normal().string();
}

namespace {

// toml++ parses nested arrays, inline tables and dotted keys by recursion: a 100 KB file of
// "a.a.a...=1" or "[[[[..." overflows the stack (found by a review). No configuration nests
// anywhere near this deep; deeper text is refused before it is parsed.
constexpr int kMaxTomlNesting = 128;

// The line (1-based) where the text nests arrays and inline tables, or dots a key, deeper than
// kMaxTomlNesting outside strings and comments; 0 when it never does. Dots count only in a
// line's key (before its '='): a value may hold any number of floats.
int TooDeeplyNestedLine(std::string_view text) {
  int line = 1, depth = 0, dots = 0;
  bool in_key = true;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      in_key = depth == 0;
    } else if (c == '=') {
      in_key = false;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      // A string, single- or multi-line; a basic string's escapes skip the byte after them.
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const std::string_view close = multi ? text.substr(i, 3) : text.substr(i, 1);
      size_t k = i + close.size();
      while (k < text.size() && text.substr(k, close.size()) != close) {
        if (c == '"' && text[k] == '\\') ++k;
        if (k < text.size() && text[k] == '\n') ++line;
        if (!multi && k < text.size() && text[k] == '\n') break;
        ++k;
      }
      i = std::min(text.size(), k + close.size()) - 1;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxTomlNesting) return line;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    } else if (c == '.' && in_key && ++dots > kMaxTomlNesting) {
      return line;
    }
  }
  return 0;
}

}  // namespace

[[nodiscard]] absl::StatusOr<toml::table> ParseToml(std::string_view text,
                                                    std::string_view source) {
  if (const int line = TooDeeplyNestedLine(text); line > 0) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", line, ": nested more than ", kMaxTomlNesting, " levels deep"));
  }
  try {
    return toml::parse(text, std::string(source));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(StrCat(source, ":", error.source().begin.line, ":",
                                             error.source().begin.column, ": ",
                                             error.description()));
  }
}

std::string TomlWhere(std::string_view source, const toml::node* node) {
  if (node == nullptr || !node->source().begin) return std::string(source);
  return StrCat(source, ":", node->source().begin.line);
}

const toml::node* TomlSection::Find(std::string_view key) {
  seen_.insert(std::string(key));
  return table_ == nullptr ? nullptr : table_->get(key);
}

absl::Status TomlSection::Error(std::string_view key, std::string_view what) const {
  std::string where(source_);
  if (table_ != nullptr) {
    if (const toml::node* node = table_->get(key); node != nullptr && node->source().begin) {
      where = StrCat(where, ":", node->source().begin.line, ":", node->source().begin.column);
    }
  }
  return absl::InvalidArgumentError(StrCat(where, ": [", name_, "] ", key, " must be ", what));
}

absl::Status TomlSection::ReadBool(std::string_view key, bool& out) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  if (!node->is_boolean()) return Error(key, "a boolean");
  out = node->as_boolean()->get();
  return absl::OkStatus();
}

absl::Status TomlSection::ReadString(std::string_view key, std::string& out) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  if (!node->is_string()) return Error(key, "a string");
  out = node->as_string()->get();
  return absl::OkStatus();
}

absl::Status TomlSection::ReadStrings(std::string_view key, std::vector<std::string>& out) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  const toml::array* array = node->as_array();
  if (array == nullptr) return Error(key, "an array of strings");
  std::vector<std::string> values;
  for (const toml::node& item : *array) {
    if (!item.is_string() || item.as_string()->get().empty()) {
      return Error(key, "an array of non-empty strings");
    }
    values.push_back(item.as_string()->get());
  }
  out = std::move(values);
  return absl::OkStatus();
}

absl::Status TomlSection::ReadStringTable(std::string_view key,
                                          std::map<std::string, std::vector<std::string>>& out) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  const toml::table* table = node->as_table();
  if (table == nullptr) return Error(key, "a table of strings");
  for (const auto& [name, value] : *table) {
    std::vector<std::string> values;
    if (value.is_string() && !value.as_string()->get().empty()) {
      values.push_back(value.as_string()->get());
    } else if (const toml::array* array = value.as_array(); array != nullptr && !array->empty()) {
      for (const toml::node& item : *array) {
        if (!item.is_string() || item.as_string()->get().empty()) {
          return Error(StrCat(key, ".", name.str()), "a string or an array of strings");
        }
        values.push_back(item.as_string()->get());
      }
    } else {
      return Error(StrCat(key, ".", name.str()), "a string or an array of strings");
    }
    out[std::string(name.str())] = std::move(values);
  }
  return absl::OkStatus();
}

absl::Status TomlSection::ReadInt64(std::string_view key, int64_t& out, int64_t min, int64_t max) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  if (!node->is_integer() || node->as_integer()->get() < min || node->as_integer()->get() > max) {
    return Error(key, StrCat("an integer in [", min, ", ", max, "]"));
  }
  out = node->as_integer()->get();
  return absl::OkStatus();
}

absl::Status TomlSection::ReadDouble(std::string_view key, double& out, double min, double max) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  std::optional<double> value = node->value<double>();  // integers convert exactly here
  if (!(node->is_integer() || node->is_floating_point()) || !value || !(*value >= min) ||
      !(*value <= max)) {
    return Error(key, StrCat("a number in [", min, ", ", max, "]"));
  }
  out = *value;
  return absl::OkStatus();
}

absl::Status TomlSection::ReadChoice(std::string_view key,
                                     const std::vector<std::string_view>& names, size_t& chosen) {
  const toml::node* node = Find(key);
  if (node == nullptr) return absl::OkStatus();
  if (node->is_string()) {
    const std::string& value = node->as_string()->get();
    for (size_t i = 0; i < names.size(); ++i) {
      if (value == names[i]) {
        chosen = i;
        return absl::OkStatus();
      }
    }
  }
  std::string listed;
  for (size_t i = 0; i < names.size(); ++i) {
    StrAppend(&listed, i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", "\"", names[i], "\"");
  }
  return Error(key, listed);
}

absl::Status TomlSection::ReadPath(std::string_view key, std::string& out,
                                   const std::string& base) {
  absl::Status status = ReadString(key, out);
  out = ResolvePath(base, out);
  return status;
}

absl::Status TomlSection::ReadPaths(std::string_view key, std::vector<std::string>& out,
                                    const std::string& base) {
  absl::Status status = ReadStrings(key, out);
  for (std::string& path : out) path = ResolvePath(base, path);
  return status;
}

absl::Status TomlSection::ReadMillis(std::string_view key, absl::Duration& out, int64_t min_ms,
                                     int64_t max_ms) {
  int64_t ms = absl::ToInt64Milliseconds(out);
  absl::Status status = ReadInt64(key, ms, min_ms, max_ms);
  if (status.ok()) out = absl::Milliseconds(ms);
  return status;
}

absl::Status TomlSection::CheckNoUnknownKeys() const {
  if (table_ == nullptr) return absl::OkStatus();
  for (const auto& [key, value] : *table_) {
    if (!seen_.contains(key.str())) {
      std::string where(source_);
      if (key.source().begin) {
        where = StrCat(where, ":", key.source().begin.line, ":", key.source().begin.column);
      }
      return absl::InvalidArgumentError(
          StrCat(where, ": unknown key '", key.str(), "' in [", name_, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pillar
