// Screening a text with a GuardConfig: the recognizers' findings, the action each one gets, and
// the text as it may go on (redacted), or the reason it may not (blocked). A block names the
// entity type and its byte offsets, never the value.
//
//   ScreenResult r = Screen(prompt, config);
//   if (r.blocked) return Refuse(400, r.block_reason);   // "CREDIT_CARD at bytes 12-31"
//   Forward(r.text);                                      // "call <PHONE_NUMBER>"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "guard/entity.h"
#include "guard/guard_config.h"

namespace pillar::guard {

struct ScreenedFinding {
  Finding finding;
  Action action;
};

struct ScreenResult {
  std::vector<ScreenedFinding> findings;  // in text order; those allowed included
  std::vector<DenyMatch> denied;          // the deny rules the text matches (flags included)
  bool blocked = false;
  std::string block_reason;  // the first blocked finding's type and offsets
  std::string text;          // the text with its redactions applied; empty when blocked
};

ScreenResult Screen(std::string_view text, const GuardConfig& config);

// A value that must go out as it is (a streamed answer's id, role or type) screened as a client
// would show it: once, or joined with its repeats (any number of them up to a value's length). What
// it finds that is not allowed (an entity type, or "deny rule 'NAME'"), without offsets; empty when
// nothing. Such a value cannot be redacted, so any finding stands for a block.
std::string RepeatedFinding(std::string_view value, const GuardConfig& config);

// A URL a request gives (an image's, a file's) screened as its server reads it, and as a model
// reads a data: URL: as written, percent-decoded, and a data: URL's base64 text decoded (but
// pictures', sounds' and videos'). The result's offsets and text are those of that reading, not
// of `url`: a URL cannot be redacted without pointing elsewhere, so a caller refuses it instead.
ScreenResult ScreenUrl(std::string_view url, const GuardConfig& config);

// The text an attachment holds (a data: URL's payload, or a file's bytes given bare as base64),
// decoded as ScreenUrl reads it, when its bytes read as text (a text file, a CSV, a JSON
// document); empty for a picture's, a sound's or a compressed file's bytes and for a link the
// upstream fetches. A model reads such a text as it reads a message: the injection heuristics
// score it and the prompt's estimate counts it.
std::string AttachmentText(std::string_view value);

// `text` with its %XX escapes decoded (and '+' read as a space where `plus_is_space`).
std::string PercentDecoded(std::string_view text, bool plus_is_space);

// The bytes that separate words, as the recognizers and deny rules read them (RE2's \s and \v).
inline constexpr std::string_view kBlankBytes = " \t\n\v\f\r";
// The longest run of non-blank bytes, or growing match, a stream holds back past its window.
inline constexpr size_t kMaxHeldRun = 64 * 1024;

// A stream's text screened as it arrives: the part that may go out now and how many bytes of
// `text` it stands for. The last `hold_back` bytes are kept back, counted as a reader sees them
// (a character that prints as nothing counts for nothing, a run of blanks for one), and so are
// any finding or deny rule's match that reaches into them, a run of non-blank bytes that has
// not ended yet, and a UTF-8 character cut in two, so that a value split across chunks is still
// seen whole; but never more than hold_back + kMaxHeldRun bytes. `final` releases everything.
// The caller keeps text[consumed:] and appends the next chunk to it. `continues_line`: what was
// released before `text` ended within a line; a terminal overwrite reaching back into it
// (a carriage return or backspaces on `text`'s first line, then a character) blocks, since what
// a terminal then shows was partly released unscreened as it reads.
struct PrefixResult {
  std::string released;  // redacted; empty when blocked
  size_t consumed = 0;
  // The window reached back further than kMaxHeldRun past it: the text is padded with blanks or
  // characters that print as nothing, so that a value's start would go out before its end.
  bool padded = false;
  std::vector<ScreenedFinding> findings;  // those in the released part
  std::vector<DenyMatch> denied;          // the deny rules matched in the released part
  bool blocked = false;
  std::string block_reason;
};
PrefixResult ScreenPrefix(std::string_view text, const GuardConfig& config, size_t hold_back,
                          bool final, bool continues_line = false);

// How a deny rule's match is named in a block reason: "deny rule 'codenames' at bytes 4-23".
std::string DenyReason(const DenyMatch& match);

// `text` with every finding, of every type the recognizers know but IP addresses, replaced by its
// type tag ("<EMAIL_ADDRESS>"), whatever a configuration allows: for what pillar itself keeps of
// text a client sent (an error message that quotes the request, in the access log).
std::string RedactAll(std::string_view text);
// RedactAll for a request's path: percent-encoded bytes are decoded first (so that
// "AKIA%5A..." is seen as what it names; in the query '+' too, as a blank; and again while
// escapes are left, for a value escaped twice), and the decoded path is what comes back.
std::string RedactPath(std::string_view path);

// The same status with RedactAll applied to its message (its code and payloads kept): for the
// errors a client is answered with, which may quote its request or an upstream's reply.
[[nodiscard]] absl::Status RedactAll(const absl::Status& status);

// What replaces `value` (a finding of `type`) under `redaction`: "<EMAIL_ADDRESS>"; every letter
// and digit masked with '*' (a card keeps its last four digits); or "<EMAIL_ADDRESS:" and 16 hex
// characters of HMAC-SHA256(key, value) ">".
std::string Redacted(std::string_view value, EntityType type, Redaction redaction,
                     std::string_view hash_key);

}  // namespace pillar::guard
