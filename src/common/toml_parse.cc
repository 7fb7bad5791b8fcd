#include "common/toml_parse.h"

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

[[nodiscard]] absl::StatusOr<toml::table> ParseToml(std::string_view text,
                                                    std::string_view source) {
  try {
    return toml::parse(text, std::string(source));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(StrCat(source, ":", error.source().begin.line, ":",
                                             error.source().begin.column, ": ",
                                             error.description()));
  }
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
