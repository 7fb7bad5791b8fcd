#include "rules/source_rules.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/strings.h"

namespace pillar::rules {
namespace {

namespace fs = std::filesystem;

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The code of a line without its trailing "//" comment and spaces. (A "//" inside a string
// literal cuts the line short; for the shapes looked at here that only hides, never invents.)
std::string_view Code(std::string_view line) {
  line = line.substr(0, line.find("//"));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

// A line at column 0 that can start a function definition: not blank, a comment, a
// preprocessor line, a closing brace or the head of a namespace or type.
bool CanStartFunction(std::string_view line) {
  if (line.empty() || line[0] == ' ' || line[0] == '\t') return false;
  for (std::string_view not_a_function : {"#", "//", "}", "namespace", "using ", "struct ",
                                          "class ", "enum ", "union ", "extern ", "typedef "}) {
    if (StartsWith(line, not_a_function)) return false;
  }
  return true;
}

}  // namespace

std::string RuleViolation::Describe() const { return StrCat(file, ":", line, ": ", what); }

std::vector<RuleViolation> CheckNodiscard(std::string_view file, std::string_view text) {
  // A declaration line: specifiers, the status type, a name, "(".
  static const std::regex kDeclaration(
      R"(^\s*((static|virtual|inline|constexpr)\s+)*(absl::Status|absl::StatusOr<.*>)\s+(~?[A-Za-z_][A-Za-z_0-9:]*)\()");
  const bool header = file.ends_with(".h");
  std::vector<RuleViolation> violations;
  const std::vector<std::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::match_results<std::string_view::const_iterator> match;
    if (!std::regex_search(lines[i].begin(), lines[i].end(), match, kDeclaration)) continue;
    const std::string name = match[4].str();
    if (!header && name.find("::") != std::string::npos) continue;  // declared in the header
    const bool marked = lines[i].find("[[nodiscard]]") != std::string_view::npos ||
                        (i > 0 && Code(lines[i - 1]).ends_with("[[nodiscard]]"));
    if (!marked) {
      violations.push_back(
          {std::string(file), static_cast<int>(i + 1),
           StrCat(name, " returns ", match[3].str(), " but is not [[nodiscard]]")});
    }
  }
  return violations;
}

std::vector<RuleViolation> CheckFunctionLength(std::string_view file, std::string_view text,
                                               int max_lines) {
  std::vector<RuleViolation> violations;
  const std::vector<std::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!CanStartFunction(lines[i])) continue;
    // The head runs to the line that opens the body; a ';' first makes it a declaration.
    std::string head;
    size_t open = i;
    for (; open < lines.size(); ++open) {
      std::string_view code = Code(lines[open]);
      head.append(code);
      if (code.ends_with("{") || code.ends_with(";") || code.empty()) break;
    }
    if (open == lines.size() || !Code(lines[open]).ends_with("{")) {
      i = open;
      continue;
    }
    const size_t paren = head.find('(');
    const bool function = paren != std::string::npos && head.find(')') != std::string::npos &&
                          head.substr(0, paren).find('=') == std::string::npos;
    size_t close = open + 1;
    while (close < lines.size() && lines[close] != "}" && lines[close] != "};") ++close;
    const int length = static_cast<int>(close - i + 1);
    const bool explained = i > 0 && [&] {
      // The comment block right above the head, read upward.
      for (size_t k = i; k > 0 && StartsWith(lines[k - 1], "//"); --k) {
        if (StartsWith(lines[k - 1], "// One function:")) return true;
      }
      return false;
    }();
    if (function && length > max_lines && !explained) {
      violations.push_back(
          {std::string(file), static_cast<int>(i + 1),
           StrCat("function of ", length, " lines (at most ", max_lines,
                  ", or a \"// One function:\" comment above it saying why): ", lines[i])});
    }
    i = close;
  }
  return violations;
}

std::vector<RuleViolation> CheckSourceRules(const fs::path& root) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<RuleViolation> violations;
  for (const fs::path& path : files) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string name = fs::relative(path, root).string();
    for (std::vector<RuleViolation> found :
         {CheckNodiscard(name, text.str()), CheckFunctionLength(name, text.str())}) {
      for (RuleViolation& v : found) violations.push_back(std::move(v));
    }
  }
  return violations;
}

}  // namespace pillar::rules
