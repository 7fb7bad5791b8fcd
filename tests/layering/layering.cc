#include "layering/layering.h"

#include <fstream>
#include <functional>
#include <sstream>

#include "common/strings.h"

namespace pillar::layering {
namespace {

namespace fs = std::filesystem;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> words;
  std::istringstream in{std::string(s)};
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// A cycle through the table's arrows, as "a -> b -> a"; empty when there is none.
std::string FindCycle(const LayerTable& table) {
  enum class Mark { kNone, kOnPath, kDone };
  std::map<std::string, Mark> mark;
  std::vector<std::string> path;
  std::string cycle;
  std::function<bool(const std::string&)> visit = [&](const std::string& folder) {
    mark[folder] = Mark::kOnPath;
    path.push_back(folder);
    for (const std::string& next : table.at(folder)) {
      if (mark[next] == Mark::kOnPath) {
        auto from = std::find(path.begin(), path.end(), next);
        for (auto it = from; it != path.end(); ++it) cycle += *it + " -> ";
        cycle += next;
        return true;
      }
      if (mark[next] == Mark::kNone && visit(next)) return true;
    }
    path.pop_back();
    mark[folder] = Mark::kDone;
    return false;
  };
  for (const auto& [folder, allowed] : table) {
    if (mark[folder] == Mark::kNone && visit(folder)) return cycle;
  }
  return "";
}

}  // namespace

absl::StatusOr<LayerTable> ParseLayerTable(std::string_view text) {
  LayerTable table;
  std::map<std::string, int> declared_at;
  std::vector<std::pair<int, std::string>> arrows_to;  // (line, folder) to check afterwards
  int number = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    const std::vector<std::string> folder = Words(line.substr(0, colon));
    if (colon == std::string_view::npos || folder.size() != 1) {
      return absl::InvalidArgumentError(
          StrCat("line ", number, ": expected 'folder: the folders it may include'"));
    }
    if (!declared_at.emplace(folder[0], number).second) {
      return absl::InvalidArgumentError(StrCat("line ", number, ": '", folder[0],
                                               "' already has a line (", declared_at[folder[0]],
                                               ")"));
    }
    std::set<std::string>& allowed = table[folder[0]];
    for (std::string& to : Words(line.substr(colon + 1))) {
      if (to == folder[0]) continue;
      arrows_to.emplace_back(number, to);
      allowed.insert(std::move(to));
    }
  }
  for (const auto& [line, to] : arrows_to) {
    if (!table.contains(to)) {
      return absl::InvalidArgumentError(
          StrCat("line ", line, ": '", to, "' has no line of its own"));
    }
  }
  if (std::string cycle = FindCycle(table); !cycle.empty()) {
    return absl::InvalidArgumentError(StrCat("the arrows close a cycle: ", cycle));
  }
  return table;
}

std::string Violation::Describe() const {
  if (line == 0) return StrCat(file, ": the folder '", from, "' has no line in the layer table");
  return StrCat(file, ":", line, ": '", from, "' may not include '", to,
                "/' (not allowed by the layer table: an arrow that points up or closes a cycle)");
}

std::vector<Violation> CheckIncludes(const fs::path& src_root, const LayerTable& table) {
  std::vector<Violation> violations;
  std::set<std::string> parts;
  for (const fs::directory_entry& entry : fs::directory_iterator(src_root)) {
    if (entry.is_directory()) parts.insert(entry.path().filename().string());
  }
  for (const std::string& part : parts) {
    if (!table.contains(part)) violations.push_back({part + "/", 0, part, ""});
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(src_root)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    const fs::path relative = fs::relative(path, src_root);
    if (relative.begin() == relative.end() || std::next(relative.begin()) == relative.end()) {
      continue;  // a file at the root belongs to no part
    }
    const std::string from = relative.begin()->string();
    const auto allowed = table.find(from);
    std::ifstream in(path);
    std::string text;
    int number = 0;
    while (std::getline(in, text)) {
      ++number;
      std::string_view line = Trim(text);
      if (!line.starts_with("#")) continue;
      line = Trim(line.substr(1));
      if (!line.starts_with("include")) continue;
      line = Trim(line.substr(7));
      if (!line.starts_with("\"")) continue;  // <system> headers are not parts
      const size_t slash = line.find('/');
      if (slash == std::string_view::npos) continue;
      const std::string to(line.substr(1, slash - 1));
      if (to == from || !parts.contains(to)) continue;
      if (allowed == table.end() || !allowed->second.contains(to)) {
        violations.push_back({relative.string(), number, from, to});
      }
    }
  }
  return violations;
}

}  // namespace pillar::layering
