// Two rules of STYLE.md that the compiler does not check by itself, checked on the source text:
//
// - Every function that returns absl::Status or absl::StatusOr is declared [[nodiscard]]
//   (absl 20220623 does not mark the types themselves), so that -Werror turns a dropped error
//   into a build failure. Checked on each declaration: in headers, and in .cc files for the
//   functions declared there (an out-of-line Class::Method definition takes its header's).
// - No function in src/ is longer than kMaxFunctionLines, unless a comment that starts with
//   "// One function:" just above it says why it must be one.
//
// Both read files only, and rely on the tree being clang-formatted (format_check): a function
// definition starts at column 0 and its body ends at the first "}" alone at column 0.
//
//   for (const RuleViolation& v : CheckSourceRules(src_root)) ADD_FAILURE() << v.Describe();
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pillar::rules {

inline constexpr int kMaxFunctionLines = 80;

struct RuleViolation {
  std::string file;  // relative to the root given
  int line = 0;      // 1-based
  std::string what;
  std::string Describe() const;
};

// The violations of one file's text; `file` names it in the results, and says by its suffix
// whether it is a header.
std::vector<RuleViolation> CheckNodiscard(std::string_view file, std::string_view text);
std::vector<RuleViolation> CheckFunctionLength(std::string_view file, std::string_view text,
                                               int max_lines = kMaxFunctionLines);

// Both checks on every .h and .cc file beneath `root`.
std::vector<RuleViolation> CheckSourceRules(const std::filesystem::path& root);

}  // namespace pillar::rules
