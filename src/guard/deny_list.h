// Deny rules (docs/guard.md, "Deny rules"): words and phrases, and RE2 patterns, that a prompt or
// an answer must not hold. Each rule flags (the text goes on; the match is counted and audited)
// or blocks. Matching is linear in the text whatever the patterns say (RE2 has no
// backtracking), so a rule cannot make the request path hang.
//
//   PILLAR_ASSIGN_OR_RETURN(std::shared_ptr<const DenyList> deny, DenyList::Build(rules));
//   for (const DenyMatch& m : deny->Match(text)) ... m.rule->name, m.begin, m.end ...
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace re2 {
class RE2;
}

namespace pillar::guard {

enum class DenyAction { kFlag, kBlock };
std::string_view DenyActionName(DenyAction action);

struct DenyRule {
  std::string name;
  DenyAction action = DenyAction::kBlock;
  // Matched without regard to case, as whole words (a letter or digit on either side is not a
  // match); spaces inside a phrase match any run of blanks.
  std::vector<std::string> words;
  std::vector<std::string> patterns;  // RE2 syntax, unanchored
};

struct DenyMatch {
  const DenyRule* rule = nullptr;
  size_t begin = 0;  // bytes of the text
  size_t end = 0;
};

class DenyList {
 public:
  // Bounds that keep one list's memory and compile time small.
  static constexpr size_t kMaxRules = 256;
  static constexpr size_t kMaxEntriesPerRule = 4096;
  static constexpr size_t kMaxEntryBytes = 1024;
  // Words of one phrase: RE2's DFA for a phrase of many repeated words ("a a a ... z") holds a
  // state per word, each as large as the phrase, and past its memory falls back to the NFA, whose
  // time grows with the words alive at once (found by review helper-69: 512 words, 4 KB of
  // streamed text took over 20 s).
  static constexpr size_t kMaxPhraseWords = 64;

  // InvalidArgument naming the rule and what is wrong (a pattern that does not compile, an
  // empty rule, a bound passed).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const DenyList>> Build(
      std::vector<DenyRule> rules);
  ~DenyList();

  // Each rule `text` matches, at its first match, in the order of the rules.
  std::vector<DenyMatch> Match(std::string_view text) const;
  // Where the earliest phrase of more than one word that the end of `text` may still complete
  // begins (as Match reads the text): `text` ends within or after one of the phrase's words,
  // the words before it there in order, whatever parts them ("see project ---- nigh" for
  // "project nightingale"); npos when none. A stream holds such a start back, however far the
  // rest is (found by review helper-68: padding between a phrase's words longer than the window
  // let its first word go out before its last came). Patterns have no such reading.
  size_t OpenStart(std::string_view text) const;
  const std::vector<DenyRule>& rules() const { return rules_; }

 private:
  DenyList() = default;
  struct Compiled;
  // Rule i's first match in `text`.
  std::optional<DenyMatch> MatchRule(size_t i, std::string_view text) const;
  // OpenStart in one reading of the text.
  size_t OpenStartIn(std::string_view text) const;
  std::vector<DenyRule> rules_;
  std::vector<Compiled> compiled_;
};

}  // namespace pillar::guard
