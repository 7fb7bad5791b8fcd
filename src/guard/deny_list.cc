#include "guard/deny_list.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/strings.h"
#include "guard/text_fold.h"

namespace pillar::guard {

std::string_view DenyActionName(DenyAction action) {
  return action == DenyAction::kBlock ? "block" : "flag";
}

// A rule as one expression: alternatives, each of which captures the span a match reports in
// one group of its own (the words' alternative keeps the characters around a word out of it).
// `open`: its phrases of more than one word as the end of a text may begin them (OpenStart);
// null when it has none.
struct DenyList::Compiled {
  std::unique_ptr<RE2> re;
  std::vector<int> span_groups;  // the capturing group of each alternative
  std::unique_ptr<RE2> open;
};

namespace {

// Characters that print as nothing (those text_fold.h drops: soft hyphen, zero-width spaces and
// joiners, direction marks and isolates, invisible operators, variation selectors, byte order
// mark, interlinear annotation marks, musical format controls, tags): allowed anywhere inside a
// word and between words, so that one of them does not hide a word from a rule.
constexpr const char* kInvisible =
    "\\x{00AD}\\x{034F}\\x{061C}\\x{17B4}\\x{17B5}\\x{180B}-\\x{180F}\\x{200B}-\\x{200F}"
    "\\x{202A}-\\x{202E}\\x{2060}-\\x{206F}\\x{FE00}-\\x{FE0F}\\x{FEFF}\\x{FFF9}-\\x{FFFB}"
    "\\x{1D173}-\\x{1D17A}\\x{E0000}-\\x{E0FFF}";

// One word: each character as itself (quoted), an ASCII letter or digit also as its fullwidth
// form (the expression ignores case, which folds those too), with invisible characters allowed
// between characters.
std::string WordExpression(std::string_view word) {
  std::string out;
  for (size_t at = 0; at < word.size();) {
    const unsigned char c = static_cast<unsigned char>(word[at]);
    size_t length = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    length = std::min(length, word.size() - at);
    if (!out.empty()) StrAppend(&out, "[", kInvisible, "]*");
    if (std::isalnum(c)) {
      // U+FF10 is the fullwidth '0', U+FF21 'A', U+FF41 'a'.
      const int fullwidth = std::isdigit(c)   ? 0xFF10 + (c - '0')
                            : std::isupper(c) ? 0xFF21 + (c - 'A')
                                              : 0xFF41 + (c - 'a');
      char hex[16];
      std::snprintf(hex, sizeof hex, "%X", fullwidth);
      StrAppend(&out, "[", std::string(1, char(c)), "\\x{", hex, "}]");
    } else {
      out += RE2::QuoteMeta(std::string(word.substr(at, length)));
    }
    at += length;
  }
  return out;
}

// What may part a phrase's words besides invisible characters: blanks of any script, combining
// marks after a blank, every C0 and C1 control (tokenizers and Python's str.split() read some
// as blanks, terminals show others as nothing), the Mongolian vowel separator, the characters
// that print as a blank without being one (the braille blank, the Hangul fillers), and the
// hyphens and underscores that join words ("project-\nnightingale", "project_nightingale").
constexpr const char* kBetweenWords =
    "\\s\\p{Z}\\p{M}\\x00-\\x1F\\x7F-\\x{9F}\\x{180E}\\x{2800}\\x{3164}\\x{115F}\\x{1160}\\x{FFA0}_"
    "\\-";

// The words of a phrase, parted by spaces or tabs.
std::vector<std::string_view> PhraseWords(std::string_view phrase) {
  std::vector<std::string_view> words;
  size_t at = 0;
  while (at < phrase.size()) {
    while (at < phrase.size() && (phrase[at] == ' ' || phrase[at] == '\t')) ++at;
    size_t end = at;
    while (end < phrase.size() && phrase[end] != ' ' && phrase[end] != '\t') ++end;
    if (end > at) words.push_back(phrase.substr(at, end - at));
    at = end;
  }
  return words;
}

// "Blue  Harbor" -> each word's expression, joined by any run of blanks of any script,
// invisible characters, hyphens or underscores.
std::string PhraseExpression(std::string_view phrase) {
  std::string out;
  for (std::string_view word : PhraseWords(phrase)) {
    if (!out.empty()) StrAppend(&out, "[", kBetweenWords, kInvisible, "]+");
    out += WordExpression(word);
  }
  return out;
}

// The start of a word still arriving: characters that are not blanks or controls (a hyphen, an
// underscore or a combining mark may be inside a word: "bravo-", "cafe\u0301"), invisible ones
// among them. Unbounded: a run longer than the word that may come can still be cut back to it by
// a terminal's backspaces (found by review helper-70: "red - - foxQQQQQQQQ" then eight
// backspaces); a run past the stream's bound goes out as any long run does (screen_prefix.cc).
constexpr const char* kPartialWord = "[^\\s\\p{Z}\\x00-\\x1F\\x7F-\\x{9F}]*";

// A phrase of words w1..wn as the end of a text may begin it: w1, then as many of w2..wn-1 in
// order as came, each after what may part words, then what may part words and the start of the
// next word (kPartialWord: any word's start, not only the next one's, so a text is held
// a little longer, never missed) up to the end. Nested, "w1(?:SEP+w2(?:SEP+w3)?)?", so that its
// size grows with the phrase's, not its square. Empty for a phrase of one word: a word still
// arriving is held back as any run of non-blank bytes is (screen.h).
std::string OpenPhraseExpression(std::string_view phrase) {
  const std::vector<std::string_view> words = PhraseWords(phrase);
  if (words.size() < 2) return std::string();
  const std::string between = StrCat("[", kBetweenWords, kInvisible, "]");
  std::string out = WordExpression(words[0]);
  for (size_t i = 1; i + 1 < words.size(); ++i) {
    StrAppend(&out, "(?:", between, "+", WordExpression(words[i]));
  }
  for (size_t i = 1; i + 1 < words.size(); ++i) out += ")?";
  StrAppend(&out, between, "*", kPartialWord);
  return out;
}

[[nodiscard]] absl::Status CheckRule(const DenyRule& rule) {
  if (rule.words.empty() && rule.patterns.empty()) {
    return absl::InvalidArgumentError(
        StrCat("deny rule '", rule.name, "' has no words and no patterns"));
  }
  if (rule.words.size() + rule.patterns.size() > DenyList::kMaxEntriesPerRule) {
    return absl::InvalidArgumentError(StrCat("deny rule '", rule.name, "' has more than ",
                                             DenyList::kMaxEntriesPerRule, " entries"));
  }
  for (const std::string& phrase : rule.words) {
    if (PhraseWords(phrase).size() > DenyList::kMaxPhraseWords) {
      return absl::InvalidArgumentError(StrCat("deny rule '", rule.name,
                                               "': a phrase has more than ",
                                               DenyList::kMaxPhraseWords, " words"));
    }
  }
  for (const auto* list : {&rule.words, &rule.patterns}) {
    for (const std::string& entry : *list) {
      if (entry.empty() || entry.size() > DenyList::kMaxEntryBytes) {
        return absl::InvalidArgumentError(StrCat("deny rule '", rule.name,
                                                 "': an entry is empty or longer than ",
                                                 DenyList::kMaxEntryBytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

DenyList::~DenyList() = default;

absl::StatusOr<std::shared_ptr<const DenyList>> DenyList::Build(std::vector<DenyRule> rules) {
  if (rules.size() > kMaxRules) {
    return absl::InvalidArgumentError(StrCat("more than ", kMaxRules, " deny rules"));
  }
  std::shared_ptr<DenyList> list(new DenyList);
  for (const DenyRule& rule : rules) {
    if (absl::Status s = CheckRule(rule); !s.ok()) return s;
    Compiled compiled;
    std::string expression;
    int groups = 0;
    if (!rule.words.empty()) {
      std::string words;
      std::string open;
      for (const std::string& w : rule.words) {
        StrAppend(&words, words.empty() ? "" : "|", PhraseExpression(w));
        const std::string begun = OpenPhraseExpression(w);
        if (!begun.empty()) StrAppend(&open, open.empty() ? "" : "|", begun);
      }
      // Whole words: not next to a letter or digit of any script.
      expression = StrCat("(?i:(?:^|[^\\pL\\pN_])(", words, ")(?:[^\\pL\\pN_]|$))");
      compiled.span_groups.push_back(++groups);
      if (!open.empty()) {
        compiled.open =
            std::make_unique<RE2>(StrCat("(?i:(?:^|[^\\pL\\pN_])(?:", open, ")$)"), RE2::Quiet);
        if (!compiled.open->ok()) {
          return absl::InvalidArgumentError(
              StrCat("deny rule '", rule.name, "' does not compile: ", compiled.open->error()));
        }
      }
    }
    for (const std::string& pattern : rule.patterns) {
      RE2 alone(pattern, RE2::Quiet);
      if (!alone.ok()) {
        return absl::InvalidArgumentError(StrCat("deny rule '", rule.name, "': pattern '", pattern,
                                                 "' does not compile: ", alone.error()));
      }
      StrAppend(&expression, expression.empty() ? "" : "|", "(", pattern, ")");
      compiled.span_groups.push_back(++groups);
      groups += alone.NumberOfCapturingGroups();
    }
    compiled.re = std::make_unique<RE2>(expression, RE2::Quiet);
    if (!compiled.re->ok()) {
      return absl::InvalidArgumentError(
          StrCat("deny rule '", rule.name, "' does not compile: ", compiled.re->error()));
    }
    list->compiled_.push_back(std::move(compiled));
  }
  list->rules_ = std::move(rules);
  return std::shared_ptr<const DenyList>(std::move(list));
}

std::optional<DenyMatch> DenyList::MatchRule(size_t i, std::string_view text) const {
  const Compiled& c = compiled_[i];
  const re2::StringPiece input(text.data(), text.size());
  std::vector<re2::StringPiece> groups(size_t(c.span_groups.back()) + 1, re2::StringPiece());
  if (!c.re->Match(input, 0, input.size(), RE2::UNANCHORED, groups.data(), int(groups.size()))) {
    return std::nullopt;
  }
  for (int g : c.span_groups) {
    const re2::StringPiece& span = groups[size_t(g)];
    if (span.data() == nullptr) continue;
    const size_t begin = size_t(span.data() - text.data());
    return DenyMatch{&rules_[i], begin, begin + span.size()};
  }
  return std::nullopt;
}

size_t DenyList::OpenStartIn(std::string_view text) const {
  size_t start = std::string_view::npos;
  const re2::StringPiece input(text.data(), text.size());
  for (const Compiled& c : compiled_) {
    // RE2 reports the leftmost match: for an expression anchored at the end, the earliest start.
    // The whole match only (its start may be the character before the phrase, which is then
    // held too): RE2 finds it with its DFAs, where a group's start takes its NFA, whose time
    // grows with the phrase's words that are alive at once (found by review helper-69).
    re2::StringPiece whole;
    if (c.open != nullptr && c.open->Match(input, 0, input.size(), RE2::UNANCHORED, &whole, 1)) {
      start = std::min(start, size_t(whole.data() - text.data()));
    }
  }
  return start;
}

size_t DenyList::OpenStart(std::string_view text) const {
  size_t start = OpenStartIn(text);
  const FoldedText kept(text);
  if (!kept.has_controls()) {
    if (kept.changed()) {
      const size_t folded = OpenStartIn(kept.text());
      if (folded != std::string_view::npos) {
        start = std::min(start, kept.Span(folded, kept.text().size()).first);
      }
    }
    return start;
  }
  for (FoldedText::Controls controls : {FoldedText::Controls::kPart, FoldedText::Controls::kDrop}) {
    const FoldedText view(text, controls);
    if (!view.changed()) continue;
    const size_t folded = OpenStartIn(view.text());
    if (folded != std::string_view::npos) {
      start = std::min(start, view.Span(folded, view.text().size()).first);
    }
  }
  return start;
}

std::vector<DenyMatch> DenyList::Match(std::string_view text) const {
  std::vector<DenyMatch> matches;
  // A rule matches the text as it is or as a reader sees it (text_fold.h): a zero-width space
  // between two words parts them in the first, look-alike letters are letters in the second.
  // With controls, as a terminal shows it too: "ign\x1b[0more" is a word to it.
  // Most texts have none: their one reading is made in the pass that finds there are none.
  std::optional<FoldedText> folded(std::in_place, text);
  std::optional<FoldedText> shown;
  if (folded->has_controls()) {
    folded.emplace(text, FoldedText::Controls::kPart);
    shown.emplace(text, FoldedText::Controls::kDrop);
  }
  for (size_t i = 0; i < compiled_.size(); ++i) {
    std::optional<DenyMatch> m = MatchRule(i, text);
    const FoldedText* views[] = {&*folded, shown ? &*shown : nullptr};
    for (const FoldedText* view : views) {
      if (m || view == nullptr || !view->changed()) continue;
      m = MatchRule(i, view->text());
      if (m) {
        const auto [begin, end] = view->Span(m->begin, m->end);
        *m = DenyMatch{m->rule, begin, end};
      }
    }
    if (m) matches.push_back(*m);
  }
  return matches;
}

}  // namespace pillar::guard
