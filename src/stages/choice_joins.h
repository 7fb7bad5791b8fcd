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

#include <array>
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
  // content, a refusal, tool calls (their names and arguments), the rest.
  static constexpr int kContentRank = 2;
  static constexpr int kArgumentsRank = 4;
  static constexpr int kRestRank = 5;
  static constexpr int kToolMemberRank = 6;  // a tool call's name (Rank), only ever in
  static constexpr int kToolCallsRank = 7;   // the tool calls: each one's members, then arguments
  static constexpr int kRanks = 8;
  // How many members of kinds the guard does not know, and how many different tools, a choice
  // may have, so that joining them stays bounded (a choice past either is refused: 502).
  static constexpr size_t kMaxRestTexts = 16;
  static int Rank(const protocol::DeltaField& field);

  // The bytes of each side of a join that are screened: as long as the longest run a stream's
  // content holds back (guard::kMaxHeldRun).
  static constexpr size_t kWindow = guard::kMaxHeldRun;
  // The end of what a client printing texts as they come was shown, screened with the next
  // kind of text: 4 KiB, longer than any value with blanks but a private key block (a run
  // without blanks longer than it ends the call, as above). Small, since every change of kind
  // (content, then a tool's name, then content ...) screens it again.
  static constexpr size_t kShownTail = 4 * 1024;

  // What is shown: kContent for a choice's content, or the serial of a held text.
  static constexpr int kContent = 0;

  // `text` of choice `index`'s content went out (released by the stream's screen).
  void ContentReleased(int64_t index, std::string_view text);

  // `texts` (each of its own kind, in order) are about to go out for choice `index`: clean as a
  // client that prints all of a choice's texts as they come shows them? Where the kind changes,
  // the end of what went out (kShownTail bytes) and the texts are screened joined (review
  // helper-75: reasoning "key AKIAIOSF", then content "ODNN7EXAMPLE ok"). Once for all of them,
  // not once each: a choice finishing with a thousand held texts costs one screen of them
  // (review helper-80: each joined to the tail, 2.5 s of CPU per MB).
  struct ShownText {
    std::string_view text;
    int kind;
  };
  Verdict Shown(int64_t index, const std::vector<ShownText>& texts);
  Verdict Shown(int64_t index, std::string_view text, int kind) {
    return Shown(index, std::vector<ShownText>{{text, kind}});
  }

  // A structural member of choice `index` (a tool's name, its id, a number) is about to go out
  // as it is: clients show it too (review helper-80: a key's halves in content and a tool's
  // name; a card's last group sent as a number, which openai-node joins to a refusal as text).
  // Screened after what was shown, as a text of a kind of its own, and kept as one of the
  // choice's texts for Finished, of its kind by Rank. Roles and types are not: they are words
  // of the API's vocabulary.
  Verdict Structural(int64_t index, const protocol::DeltaField& field, std::string_view value);

  // Choice `index` finishes with `held` (its held texts, screened whole): clean as a client that
  // rebuilds it kind by kind shows it, in the order of Rank (the kinds a client may not know,
  // Rank's "rest", both first and last: a client may show them above the answer, as it does
  // OpenRouter's reasoning_details or LiteLLM's thinking_blocks, review helper-80), whatever
  // order the texts came or go out in, and each kind before and after each other kind alone (as
  // a client that shows some kinds and not others, in its own order, does)? At most seven joins
  // in order and thirty pairs, each of a bounded size, once per choice.
  Verdict Finished(int64_t index, const std::vector<HeldOut>& held);

 private:
  // Text screened as one side of a join: what it holds, and whether the text it stands for was
  // longer (a side cut by the window).
  struct Side {
    std::string_view text;
    bool cut = false;
  };
  Verdict Join(int64_t index, Side before, Side after, std::string_view client) const;

  // A finishing choice's texts by kind (Rank), each kind's texts joined in the order a client
  // shows them, and how many texts each kind has.
  struct RestText {
    std::string member;  // its path's names ("reasoning_details.text")
    std::string text;    // each element's, in order
  };
  struct Kinds {
    std::array<std::string, kRanks> texts;
    std::array<int, kRanks> counts{};
    std::vector<RestText> rest;           // the rest's texts by member
    std::vector<std::string_view> names;  // the tools' names, each once
  };
  Kinds KindsOf(int64_t index, const std::vector<HeldOut>& held) const;

  // A finishing choice's kinds, and its content as it went out (null: a whole answer's, which
  // is among the kinds).
  struct Content;
  struct Reading {
    const Kinds& kinds;
    const Content* content;
    Side StartOf(int rank) const;
    Side EndOf(int rank) const;
  };
  // The kinds in the orders clients show them (Finished), and any two or three texts in any order.
  Verdict InOrder(int64_t index, const Reading& reading) const;
  Verdict AnyOrder(int64_t index, const Reading& reading) const;
  // A text AnyOrder joins: a kind, or one of the rest's texts, or a tool's name.
  struct Piece {
    Side start;
    Side end;
    int rank;  // kRestRank for each of the rest's texts, kToolMemberRank for a name
  };
  Verdict Triples(int64_t index, const std::vector<Piece>& pieces) const;
  static bool Apart(const Piece& a, const Piece& b);
  static Side Tail(Side side, size_t window);  // its last `window` bytes
  static Side Head(Side side, size_t window);  // its first

  struct Printed {
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
  std::map<int64_t, Printed> shown_;
  std::map<int64_t, Content> content_;
  std::map<int64_t, std::vector<HeldOut>> kept_;  // by choice
  int structural_serial_ = 0;  // the kind of each structural member shown: -1, -2 ...
};

}  // namespace pillar::stages
