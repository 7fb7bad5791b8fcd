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
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pillar {

// InvalidArgument naming `source`, the line and column when the text is not valid TOML.
[[nodiscard]] absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source);

// "source:line" of `node` (source alone without one): where an error found after the reading
// points, so that the operator edits the right line.
std::string TomlWhere(std::string_view source, const toml::node* node);

// Reads the keys of one table (which may be absent: then every read keeps its default). A key
// of the wrong type or out of range is an error, never a silent default, and
// CheckNoUnknownKeys() reports any key nobody read, so a typo cannot go unnoticed.
// The longest interval a configuration accepts in milliseconds: a day. Beyond it, a typo.
inline constexpr int64_t kMaxConfigMillis = 24LL * 3600 * 1000;

// `path` taken from `base` when it is relative; empty paths, "-" (standard output) and absolute
// paths are returned as they are.
std::string ResolvePath(const std::string& base, const std::string& path);

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
  // A string naming one of `choices`; `out` becomes its value. Anything else is an error that
  // lists the choices.
  template <typename E>
  [[nodiscard]] absl::Status ReadEnum(
      std::string_view key, E& out, std::initializer_list<std::pair<std::string_view, E>> choices) {
    std::vector<std::string_view> names;
    for (const auto& choice : choices) names.push_back(choice.first);
    size_t chosen = names.size();
    absl::Status status = ReadChoice(key, names, chosen);
    if (status.ok() && chosen < names.size()) out = std::data(choices)[chosen].second;
    return status;
  }
  // A file's path; a relative one is taken from `base` (the configuration file's directory).
  [[nodiscard]] absl::Status ReadPath(std::string_view key, std::string& out,
                                      const std::string& base);
  [[nodiscard]] absl::Status ReadPaths(std::string_view key, std::vector<std::string>& out,
                                       const std::string& base);
  // A number of milliseconds in [min_ms, max_ms], as a duration.
  [[nodiscard]] absl::Status ReadMillis(std::string_view key, absl::Duration& out, int64_t min_ms,
                                        int64_t max_ms);
  bool Contains(std::string_view key) const {
    return table_ != nullptr && table_->get(key) != nullptr;
  }
  // Marks a key read by other means (a sub-table, an array of tables) as known.
  void Allow(std::string_view key) { seen_.insert(std::string(key)); }
  [[nodiscard]] absl::Status CheckNoUnknownKeys() const;

 private:
  [[nodiscard]] absl::Status ReadInt64(std::string_view key, int64_t& out, int64_t min,
                                       int64_t max);
  // Sets `chosen` to the index of the name the key holds (unchanged when the key is absent).
  [[nodiscard]] absl::Status ReadChoice(std::string_view key,
                                        const std::vector<std::string_view>& names, size_t& chosen);
  const toml::node* Find(std::string_view key);
  // "source:line:column: [name] key must be what" (the line of the offending value).
  [[nodiscard]] absl::Status Error(std::string_view key, std::string_view what) const;

  const toml::table* table_;
  std::string name_;
  std::string_view source_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace pillar
