#include "guard/injection.h"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <memory>

namespace pillar::guard {
namespace {

struct Sign {
  std::string_view name;
  double weight;
  const char* expression;
};

// Bounded gaps ([^.\n]{0,40}) keep a sign within one sentence; \b is ASCII, so Portuguese words
// are written to end in an ASCII letter.
constexpr Sign kSigns[] = {
    {"override_instructions", 0.7,
     R"((?i)\b(ignore|disregard|forget|override|bypass|skip)\b[^.\n]{0,40}\b(previous|prior|above|)"
     R"(earlier|preceding|all|any|your|the|system|initial|original)\b[^.\n]{0,30}\b(instructions?|)"
     R"(rules|prompts?|directions|guidelines|guardrails|constraints|polic(y|ies))\b)"},
    {"override_instructions", 0.7,
     R"((?i)\b(ignore|ignora|desconsidere|esque[çc]a|esque[çc]am)\b[^.\n]{0,40})"
     R"((instru[çc][õo]es|regras|orienta[çc][õo]es|diretrizes))"},
    {"reveal_prompt", 0.6,
     R"((?i)\b(reveal|show|print|repeat|output|display|tell me|leak|dump|write out)\b[^.\n]{0,40})"
     R"((system prompt|your (initial |original |hidden |secret |full )?(instructions|prompt|rules))"
     R"(|the (hidden|secret|initial|original) (prompt|instructions)))"},
    {"reveal_prompt", 0.6,
     R"((?i)\b(mostre|revele|repita|imprima|diga)\b[^.\n]{0,40}(prompt do sistema|)"
     R"(suas instru[çc][õo]es|instru[çc][õo]es (iniciais|ocultas|secretas|do sistema)))"},
    {"persona_without_rules", 0.6,
     R"((?i)\b(you are now|from now on,? you|act as|pretend (to be|you are|that you)|roleplay as|)"
     R"(simulate)\b[^.\n]{0,60}\b(dan|jailbr[eo]ak\w*|unrestricted|unfiltered|uncensored|)"
     R"(no (rules|limits|restrictions|filters)|without (any )?(rules|limits|restrictions|filters)))"},
    {"jailbreak_term", 0.5,
     R"((?i)\b(developer mode|dan mode|jailbreak mode|god mode|do anything now|modo desenvolvedor))"},
    {"template_tokens", 0.6,
     R"((<\|im_start\|>|<\|im_end\|>|<\|system\|>|<\|endoftext\|>|\[/?INST\]|<<SYS>>|)"
     R"(<\|start_header_id\|>|<\|eot_id\|>))"},
    {"role_header", 0.3, R"((?im)^\s*(#{2,}\s*)?(system|assistant|sistema)\s*(prompt)?\s*:)"},
    {"new_instructions", 0.4,
     R"((?i)\b(new|updated|real|actual|novas|verdadeiras)\s+(instructions|rules|task|)"
     R"(instru[çc][õo]es|regras)\s*:)"},
};

// One pass over the text for every sign (RE2::Set), built once.
const re2::RE2::Set& Signs() {
  static const re2::RE2::Set* set = [] {
    re2::RE2::Options options;
    options.set_log_errors(false);
    auto* s = new re2::RE2::Set(options, re2::RE2::UNANCHORED);
    for (const Sign& sign : kSigns) {
      if (s->Add(sign.expression, nullptr) < 0) std::abort();  // a bug in the table above
    }
    if (!s->Compile()) std::abort();
    return s;
  }();
  return *set;
}

// `text` without the characters that print as nothing (soft hyphen U+00AD, zero-width space and
// joiners U+200B-U+200D, word joiner U+2060, byte order mark U+FEFF), which would otherwise
// split a sign's words where a reader sees none.
std::string_view Visible(std::string_view text, std::string& storage) {
  auto invisible_at = [&](size_t i) -> size_t {  // its length in bytes, or 0
    const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
    if (i + 1 < text.size() && b(0) == 0xC2 && b(1) == 0xAD) return 2;
    if (i + 2 >= text.size()) return 0;
    if (b(0) == 0xE2 && b(1) == 0x80 && b(2) >= 0x8B && b(2) <= 0x8D) return 3;
    if (b(0) == 0xE2 && b(1) == 0x81 && b(2) == 0xA0) return 3;
    if (b(0) == 0xEF && b(1) == 0xBB && b(2) == 0xBF) return 3;
    return 0;
  };
  size_t i = 0;
  while (i < text.size() && invisible_at(i) == 0) ++i;
  if (i == text.size()) return text;
  storage.assign(text.substr(0, i));
  while (i < text.size()) {
    const size_t skip = invisible_at(i);
    if (skip > 0) {
      i += skip;
    } else {
      storage.push_back(text[i++]);
    }
  }
  return storage;
}

}  // namespace

InjectionScore ScoreInjection(std::string_view raw) {
  InjectionScore result;
  std::string storage;
  const std::string_view text = Visible(raw, storage);
  std::vector<int> found;
  Signs().Match(re2::StringPiece(text.data(), text.size()), &found);
  // A sign's words keep to one sentence and line ([^.\n] gaps), but a line break alone, which
  // a model reads past, does not end a sentence: "Ignore all previous\ninstructions". Read again
  // with such breaks as spaces (a blank line still ends it, and line starts still count for the
  // role headers, from the first reading).
  if (text.find('\n') != std::string_view::npos) {
    std::string joined(text);
    for (size_t i = 0; i < joined.size(); ++i) {
      if (joined[i] != '\n') continue;
      size_t before = i, after = i + 1;
      if (before > 0 && joined[before - 1] == '\r') --before;
      if (after < joined.size() && joined[after] == '\r') ++after;
      const bool blank_line = (before > 0 && joined[before - 1] == '\n') ||
                              (after < joined.size() && joined[after] == '\n');
      if (!blank_line) joined[i] = ' ';
    }
    std::vector<int> more;
    Signs().Match(re2::StringPiece(joined.data(), joined.size()), &more);
    found.insert(found.end(), more.begin(), more.end());
  }
  if (found.empty()) return result;
  std::sort(found.begin(), found.end());
  double keep = 1;
  for (int i : found) {
    const Sign& sign = kSigns[size_t(i)];
    bool seen = false;  // a sign written in two languages counts once
    for (std::string_view s : result.signals) seen = seen || s == sign.name;
    if (seen) continue;
    result.signals.push_back(sign.name);
    keep *= 1 - sign.weight;
  }
  result.score = 1 - keep;
  return result;
}

}  // namespace pillar::guard
