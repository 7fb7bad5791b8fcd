// Parses TOML text into a table, turning toml++'s exceptions (Debian builds it with them) into
// an absl::Status at this boundary, so no caller sees an exception; and reads a table strictly.
//
//   absl::StatusOr<toml::table> table = ParseToml(text, "pillar.toml");
//   TomlSection server(table->get_as<toml::table>("server"), "server", "pillar.toml");
//   PILLAR_RETURN_IF_ERROR(server.ReadInt("threads", config.threads, 0, 256));
//   PILLAR_RETURN_IF_ERROR(server.CheckNoUnknownKeys());
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar {

// InvalidArgument naming `source`, the line and column when the text is not valid TOML.
[[nodiscard]] absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source);

// Reads the keys of one table (which may be absent: then every read keeps its default). A key
// of the wrong type or out of range is an error, never a silent default, and
// CheckNoUnknownKeys() reports any key nobody read, so a typo cannot go unnoticed.
class TomlSection {
 public:
  // `name` is how errors name the table, e.g. "data" or "batching".
  TomlSection(const toml::table* table, std::string name, std::string_view source)
      : table_(table), name_(std::move(name)), source_(source) {}

  // Leaves `out` unchanged when the key is absent.
  [[nodiscard]] absl::Status ReadBool(std::string_view key, bool& out);
  [[nodiscard]] absl::Status ReadString(std::string_view key, std::string& out);
  // An array of non-empty strings.
  [[nodiscard]] absl::Status ReadStrings(std::string_view key, std::vector<std::string>& out);
  // A table of string values (or arrays of strings), e.g. attributes.
  [[nodiscard]] absl::Status ReadStringTable(std::string_view key,
                                             std::map<std::string, std::vector<std::string>>& out);
  template <typename T>
  [[nodiscard]] absl::Status ReadInt(std::string_view key, T& out, int64_t min, int64_t max) {
    int64_t value = static_cast<int64_t>(out);
    absl::Status status = ReadInt64(key, value, min, max);
    if (status.ok()) out = static_cast<T>(value);
    return status;
  }
  // A number (integer or float) in [min, max].
  [[nodiscard]] absl::Status ReadDouble(std::string_view key, double& out, double min, double max);
  bool Contains(std::string_view key) const {
    return table_ != nullptr && table_->get(key) != nullptr;
  }
  // Marks a key read by other means (a sub-table, an array of tables) as known.
  void Allow(std::string_view key) { seen_.insert(std::string(key)); }
  [[nodiscard]] absl::Status CheckNoUnknownKeys() const;

 private:
  [[nodiscard]] absl::Status ReadInt64(std::string_view key, int64_t& out, int64_t min,
                                       int64_t max);
  const toml::node* Find(std::string_view key);
  // "source:line:column: [name] key must be what" (the line of the offending value).
  [[nodiscard]] absl::Status Error(std::string_view key, std::string_view what) const;

  const toml::table* table_;
  std::string name_;
  std::string_view source_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace pillar
