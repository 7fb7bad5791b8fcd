// The layering check: which folder of src/ may include which (src/layering.txt), and the
// #include lines that break it. Reads files only; used by layering_test.cc on the real tree and
// on planted ones.
//
//   absl::StatusOr<LayerTable> table = ParseLayerTable(text);   // refuses a cycle
//   for (const Violation& v : CheckIncludes(src_root, *table)) ADD_FAILURE() << v.Describe();
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::layering {

// folder -> the folders it may include besides itself.
using LayerTable = std::map<std::string, std::set<std::string>>;

// Lines "folder: allowed ...", '#' comments and blank lines. An error names the line for a
// malformed or repeated line or an arrow to a folder without a line of its own, and names the
// folders of a cycle when the arrows close one.
absl::StatusOr<LayerTable> ParseLayerTable(std::string_view text);

struct Violation {
  std::string file;  // relative to the source root, e.g. "models/model_config.h"
  int line = 0;      // 1-based; 0 for a folder missing from the table
  std::string from;  // the including file's folder
  std::string to;    // the included file's folder
  std::string Describe() const;
};

// Every "#include "<folder>/..." in the .h and .cc files beneath `src_root` whose <folder> is
// a folder of `src_root` other than the file's own and not allowed by `table`; and every folder
// of `src_root` that has no line in the table.
std::vector<Violation> CheckIncludes(const std::filesystem::path& src_root,
                                     const LayerTable& table);

}  // namespace pillar::layering
