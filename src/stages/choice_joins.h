// What clients join of a streamed choice's texts, screened where the guard screened the texts
// apart (guarded_events.cc). A client rebuilds each choice from its deltas and shows its kinds of
// text (reasoning, content, refusal, tool calls' arguments) either as they come or kind by kind,
// some kinds and not others; a value split where two texts meet is whole on its screen. Each
// join is screened across the point where the texts meet, bounded: the last kWindow bytes of
// what came before and the first kWindow bytes of what follows. A run without blanks that
// crosses the point and fills the window on a side that was cut cannot be seen whole there
// (a JWT longer than the window split between reasoning and content: review helper-79), so it
// stops the call too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "guard/guard_config.h"
#include "guard/screen.h"
#include "protocol/openai_texts.h"

namespace pillar::stages {

class ChoiceJoins {
 public:
  explicit ChoiceJoins(const guard::GuardConfig& config) : config_(config) {}

  // Why a join stops the call (OK: it does not), and the screen of the join that found a value
  // (its findings and deny rules' matches, to count and audit; empty when it was a cut run).
  struct Verdict {
    absl::Status stop;
    guard::ScreenResult screen;
    bool ok() const { return stop.ok(); }
  };

  // A held text of a finishing choice as it goes out (screened whole, redacted).
  struct HeldOut {
    protocol::DeltaField field;
    std::string sent;
  };

  // The kinds of text, as a client that rebuilds a choice shows them: reasoning (each of the
  // two members a kind of its own: a client reads one or the other, review helper-79), the
  // content, a refusal, tool calls' arguments, the rest.
  static constexpr int kContentRank = 2;
  static constexpr int kRanks = 6;
  static int Rank(const protocol::DeltaField& field);

  // The bytes of each side of a join that are screened: as long as the longest run a stream's
  // content holds back (guard::kMaxHeldRun).
  static constexpr size_t kWindow = guard::kMaxHeldRun;
  // The end of what a client printing texts as they come was shown, screened with the next.
  static constexpr size_t kShownTail = 16 * 1024;

  // What is shown: kContent for a choice's content, or the serial of a held text.
  static constexpr int kContent = 0;

  // `text` of choice `index`'s content went out (released by the stream's screen).
  void ContentReleased(int64_t index, std::string_view text);

  // `text` (of `kind`) is about to go out for choice `index`: clean as a client that prints all
  // of a choice's texts as they come shows it? Where the kind changes, the end of what went out
  // and `text` are screened joined (review helper-75: reasoning "key AKIAIOSF", then content
  // "ODNN7EXAMPLE ok"). Bounded: kShownTail bytes, at most once per held text and once after.
  Verdict Shown(int64_t index, std::string_view text, int kind);

  // Choice `index` finishes with `held` (its held texts, screened whole): clean as a client that
  // rebuilds it kind by kind shows it, in the order of Rank, whatever order the texts came or go
  // out in, and each kind after each earlier kind alone (as a client that shows some kinds and
  // not others does)? At most five joins in order and fifteen pairs, each of a bounded size,
  // once per choice.
  Verdict Finished(int64_t index, const std::vector<HeldOut>& held);

 private:
  // Text screened as one side of a join: what it holds, and whether the text it stands for was
  // longer (a side cut by the window).
  struct Side {
    std::string_view text;
    bool cut = false;
  };
  Verdict Join(int64_t index, Side before, Side after, std::string_view client) const;

  struct ShownText {
    std::string tail;
    size_t total = 0;  // bytes shown in all
    int kind = kContent;
  };
  // The start and the end of a choice's content as released, and its size.
  struct Content {
    std::string head;
    std::string tail;
    size_t total = 0;
  };

  const guard::GuardConfig& config_;
  std::map<int64_t, ShownText> shown_;
  std::map<int64_t, Content> content_;
};

}  // namespace pillar::stages
