#include "guard/classifier.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace pillar::guard {

namespace {

bool IsCode(std::string_view w) {
  return !w.empty() && w.size() <= 32 && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// Azure AI Content Safety's answer: {"categoriesAnalysis":[{"category":..,"severity":..}, ...]}.
[[nodiscard]] absl::StatusOr<ClassifierVerdict> ParseSeverities(std::string_view text,
                                                                const absl::Status& not_a_verdict) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array analysis;
  if (parser.parse(text.data(), text.size()).get(doc) != simdjson::SUCCESS ||
      doc["categoriesAnalysis"].get(analysis) != simdjson::SUCCESS || analysis.size() > 32) {
    return not_a_verdict;
  }
  ClassifierVerdict verdict;
  for (simdjson::dom::element item : analysis) {
    std::string_view category;
    int64_t severity = 0;
    if (item["category"].get(category) != simdjson::SUCCESS || !IsCode(category) ||
        item["severity"].get(severity) != simdjson::SUCCESS || severity < 0 || severity > 7) {
      return not_a_verdict;
    }
    if (severity == 0) continue;
    verdict.safe = false;
    verdict.categories.emplace_back(category);
    verdict.severities.push_back(int(severity));
  }
  return verdict;
}

}  // namespace

std::vector<std::string> Blocking(const ClassifierConfig& config,
                                  const ClassifierVerdict& verdict) {
  std::vector<std::string> blocking;
  for (size_t i = 0; i < verdict.categories.size(); ++i) {
    const std::string& c = verdict.categories[i];
    const int severity = i < verdict.severities.size() ? verdict.severities[i] : -1;
    bool blocks;
    if (severity < 0) {
      blocks = config.block.empty() ||
               std::find(config.block.begin(), config.block.end(), c) != config.block.end();
    } else {
      auto it = config.thresholds.find(c);
      blocks = severity >= (it != config.thresholds.end() ? it->second : config.severity_threshold);
    }
    if (blocks) blocking.push_back(c);
  }
  return blocking;
}

[[nodiscard]] absl::StatusOr<ClassifierVerdict> ParseClassifierVerdict(std::string_view text) {
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
  const size_t first_char = text.find_first_not_of(" \t\r\n");
  if (first_char != std::string_view::npos && text[first_char] == '{') {
    return ParseSeverities(text, not_a_verdict);
  }
  if (words.empty()) return not_a_verdict;
  ClassifierVerdict verdict;
  const std::string first = lower(words[0]);
  if (first == "safe" && words.size() == 1) return verdict;
  if (first != "unsafe" || words.size() > 33) return not_a_verdict;
  verdict.safe = false;
  for (size_t i = 1; i < words.size(); ++i) {
    if (!IsCode(words[i])) return not_a_verdict;
    verdict.categories.emplace_back(words[i]);
    verdict.severities.push_back(-1);
  }
  if (verdict.categories.empty()) {
    verdict.categories.push_back("unsafe");
    verdict.severities.push_back(-1);
  }
  return verdict;
}

}  // namespace pillar::guard
