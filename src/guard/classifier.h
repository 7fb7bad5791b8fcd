// The guard's classifier hook (docs/guard.md, "Classifier"): a language model served by the same
// pillar (local or behind platform = "openai") that judges the text a user wrote, answering as
// Llama Guard does ("safe", or "unsafe" and the categories it breaks: "unsafe\nS1,S10"), or as
// Azure AI Content Safety does (a severity from 0 to 7 per category:
// {"categoriesAnalysis":[{"category":"Violence","severity":4}]}). A category the configuration
// blocks (for severities: at or above its threshold) refuses the call (403), as Azure API
// Management's llm-content-safety does; every verdict is counted and audited by category.
//
//   absl::StatusOr<ClassifierVerdict> v = ParseClassifierVerdict(answer_text);
//   if (v.ok() && config.classifier.Blocks(*v)) ... 403 naming v->categories ...
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::guard {

struct ClassifierConfig {
  std::string model;               // empty: no classifier
  std::vector<std::string> block;  // the categories that block; empty: every unsafe verdict
  // Severities: the least that blocks, per category, and for the categories not named.
  std::map<std::string, int, std::less<>> thresholds;
  int severity_threshold = 4;
  bool allow_on_error = false;  // when the classifier cannot answer: let the call through
  int64_t max_tokens = 32;      // the verdict's length, asked of the classifier
  // What it judges (judge = ["prompts", "answers"]): what users and tools wrote, before the
  // call; the model's answer (not streamed), after it, with the prompt as its context.
  bool judge_prompts = true;
  bool judge_answers = false;

  bool enabled() const { return !model.empty(); }
};

struct ClassifierVerdict {
  bool safe = true;
  std::vector<std::string> categories;  // for an unsafe verdict, as the classifier named them
  std::vector<int> severities;          // each one's, 1-7; -1 where the classifier gives none
};

// The categories of an unsafe verdict that block: with no severity, those in `block` (all of
// them when it is empty); with one, those at or above their threshold.
std::vector<std::string> Blocking(const ClassifierConfig& config, const ClassifierVerdict& verdict);

// InvalidArgument when `text` is not a verdict: the first word is "safe" or "unsafe" (any case),
// then, for unsafe, category codes (letters, digits, '_', '-', at most 32 each, at most 32 of
// them) separated by blanks, commas or line breaks; or a JSON object whose "categoriesAnalysis"
// is an array of {"category": code, "severity": 0-7} (safe when every severity is 0). Anything
// else is refused, not guessed at: a classifier that says something else has failed.
[[nodiscard]] absl::StatusOr<ClassifierVerdict> ParseClassifierVerdict(std::string_view text);

}  // namespace pillar::guard
