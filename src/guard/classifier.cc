#include "guard/classifier.h"

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace pillar::guard {

std::vector<std::string> ClassifierConfig::Blocking(
    const std::vector<std::string>& categories) const {
  if (block.empty()) return categories;
  std::vector<std::string> blocking;
  for (const std::string& c : categories) {
    if (std::find(block.begin(), block.end(), c) != block.end()) blocking.push_back(c);
  }
  return blocking;
}

absl::StatusOr<ClassifierVerdict> ParseClassifierVerdict(std::string_view text) {
  std::vector<std::string_view> words;
  for (size_t at = 0; at < text.size();) {
    const char c = text[at];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\n' &&
           text[end] != '\r' && text[end] != ',') {
      ++end;
    }
    words.push_back(text.substr(at, end - at));
    at = end;
  }
  auto lower = [](std::string_view w) {
    std::string out(w);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const absl::Status not_a_verdict = absl::InvalidArgumentError(
      "the classifier's answer is not a verdict (\"safe\", or \"unsafe\" and categories)");
  if (words.empty()) return not_a_verdict;
  ClassifierVerdict verdict;
  const std::string first = lower(words[0]);
  if (first == "safe" && words.size() == 1) return verdict;
  if (first != "unsafe" || words.size() > 33) return not_a_verdict;
  verdict.safe = false;
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string_view w = words[i];
    const bool code = !w.empty() && w.size() <= 32 && std::all_of(w.begin(), w.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!code) return not_a_verdict;
    verdict.categories.emplace_back(w);
  }
  if (verdict.categories.empty()) verdict.categories.push_back("unsafe");
  return verdict;
}

}  // namespace pillar::guard
