// A streamed choice's content as a client that decodes its JSON escapes reads it
// (guarded_events.cc): structured outputs are parsed by clients, which show what the escapes
// spell. Kept per choice beside the text the guard holds back: the end of what went out, and
// whether the content opens JSON.
//
//   EscapedContent escaped;
//   held.append(chunk);
//   escaped.TakeDisplayControls(held, appended_at, finished, config);
//   if (!finished && escaped.Waits(held)) return;   // nothing released yet
//   if (std::string why = escaped.Finding(held, config); !why.empty()) ... block
//   if (!escaped.Released(released, config)) ... 502: padding
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "guard/guard_config.h"

namespace pillar::stages {

class EscapedContent {
 public:
  // Structured outputs: a client parses the content and shows what it decodes, so a content
  // that opens JSON (OpensJson) loses the escapes of display controls from `held`, as its
  // display controls went (ShownParsed; review helper-87: "XX\u00adAKIA..." shows a key after a
  // terminal's '-'; helper-90: "????????ODNN7EXAMPLE\rAKIAIOSF" one after a carriage return).
  // `appended_at`: where what came since the last call begins in `held`.
  void TakeDisplayControls(std::string& held, size_t appended_at, bool finished,
                           const guard::GuardConfig& config);

  // Whether the reading waits for more of `held`, releasing nothing meanwhile: until what is
  // held is a 16th of the read, so that a text that grows a little at a time costs linear time
  // however long the tail is in bytes (review helper-87: 12,000 chunks of two escaped
  // zero-width spaces and a blank, each read with a tail of 13 KB and more, took 5.35 s). A
  // text of a byte a character never waits with a window of 86 bytes or more: its tail is at
  // most 1.25 times TailShowing(), and the window holds more than a 15th of that.
  bool Waits(const std::string& held) const;

  // Why `held`, read with the end of what went out as a client that decodes its JSON escapes
  // reads it, cannot go out; empty when it can. With the end: escapes make a value longer as
  // written than the window counts it (review helper-84: an IBAN of \u escapes streamed in
  // 3-byte chunks), and an escape that went out still changes the value the held text ends
  // (review helper-87: "\u0044\u0045\u0038\u0039 3704 ..." with a 16-byte window). A value's
  // raw run without blanks is held whole; one with blanks fits the window.
  std::string Finding(const std::string& held, const guard::GuardConfig& config) const;

  // Keeps the end of what went out (`released`, as the upstream wrote it): by what a reader
  // that decodes escapes sees, not by bytes, never cut between an escape's backslash and what
  // it escapes. False when seeing that much takes more than kMaxTail bytes: escapes of nothing
  // pad the text (a 502).
  [[nodiscard]] bool Released(std::string_view released, const guard::GuardConfig& config);

 private:
  // The tail: at least this and four windows as a decoding reader sees it (a value whose raw
  // start went out is seen whole with its context), at most kMaxTail bytes written.
  static constexpr size_t kTail = 1024;
  static constexpr size_t kMaxTail = 64 * 1024;
  // How much of a content OpensJson may leave undecided: past it (blanks after a '['), it is
  // read as JSON, so that each chunk rescans no more than that (review helper-92: 14,600 chunks
  // of four blanks after a '[' each rescanned all that was held).
  static constexpr size_t kUndecidedJson = 1024;

  static size_t TailShowing(const guard::GuardConfig& config);

  std::string sent_tail_;     // the end of what was released, as the upstream wrote it
  std::optional<bool> json_;  // OpensJson's answer, unknown until the bytes that say came
};

}  // namespace pillar::stages
