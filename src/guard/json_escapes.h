// A text as a JSON reader decodes it. A model's content (structured outputs) and a tool call's
// arguments are JSON that clients parse (openai-node's parsed and parsed_arguments, every tool
// runner): an escape such as \u004f is, to them, the character it names, so a value spelled with
// escapes ("AKIAIOSF\u004fDNN7EXAMPLE", "bob\u0040example.com") reaches them whole where the
// guard read none (review helper-83).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "guard/guard_config.h"

namespace pillar::guard {

// Whether `text` holds a backslash, the start of every JSON escape.
inline bool MayHaveJsonEscapes(std::string_view text) {
  return text.find('\\') != std::string_view::npos;
}

// `text` with its JSON string escapes decoded (\u and four hex digits, surrogate pairs included,
// \n, \t, \r, \b, \f, \", \\, \/), wherever they are: inside or outside the JSON's strings, since a
// client may decode a string the model wrote as a whole. A backslash that starts no escape is kept;
// a lone surrogate reads as a blank.
std::string JsonDecoded(std::string_view text);
// The same, with `from` (when not null) set to the offset in `text` each byte of the result
// came from, and one more entry, text.size().
std::string JsonDecoded(std::string_view text, std::vector<uint32_t>* from);

// The type of a value that `text` read as JSON decodes it holds and `text` as it is does not
// show at the same place with the same characters, empty when none: a value spelled with
// escapes, or changed by one beside it.
// Decoded up to kMaxJsonLevels times, for JSON in a string of JSON.
inline constexpr int kMaxJsonLevels = 4;
// `decoded_once`, when not null, is set to `text` decoded once (JsonDecoded), which the reading
// computes anyway.
std::string EscapedFinding(std::string_view text, const GuardConfig& config,
                           std::string* decoded_once = nullptr);

// How many bytes at the end of `text` a reader that decodes its JSON escapes sees as at least
// `visible` characters: a character, escaped or not, counts as one, or as none when it prints as
// nothing (PrintsAsNothing: a zero-width space, a soft hyphen, a tag character, a combining
// mark); other bytes count as they are. All of `text` when it shows fewer (review helper-85:
// 2,800 escaped zero-width spaces pushed a card's start out of a tail counted in bytes).
size_t TailShowing(std::string_view text, size_t visible);

// How many backslashes run up to text[at] (at <= text.size()): text[at] is the byte an escape's
// backslash escapes when they are odd. Only the run counts: a backslash is escaped only by the
// one before it, and the byte before the run, not being one, escapes nothing.
size_t BackslashesBefore(std::string_view text, size_t at);

// `at`, or `at - 1` when text[at] is the byte the backslash at text[at - 1] escapes (text[0]
// read as escaped by nothing), for at <= text.size(): where to cut a text so that what is kept
// begins as it began in the whole (review helper-89: a tail cut inside a run of 1,301
// backslashes read the escape after it as text).
size_t UnescapedCut(std::string_view text, size_t at);

// `text` without its "\u" escapes (a surrogate pair's two) of a layout control
// (guard/display_controls.h: ESC, C1, bidirectional formatting, a soft hyphen ...), kept in
// `storage` when it had any (a view of `storage`), else `text` itself. What answer_controls =
// "strip" does to the characters themselves, done to the escapes of a text clients parse as JSON
// (review helper-87: {"k":"XX\u00adAKIA..."} shows a key after a terminal's '-'; helper-88: an
// Arabic text's \u200f or a German word's \u00ad is no reason to refuse the answer). An ESC's
// escape goes alone, so what followed it shows as the text it is; so do the escapes of lone high
// surrogates (a client shows a box for one, or pairs it across a removed escape). One right after
// a "\u" with fewer than four hex digits (no escape) becomes a blank, so that no removal makes an
// escape. Applied to its own result it changes nothing. `starts_escaped`: text[0] is
// the second byte of an escape whose backslash is before `text`; `ends_open`: more of the text
// may follow (a stream), so a high surrogate's escape that ends it, whole or with less than a
// whole escape after it, is left (with what follows it) for what comes.
std::string_view WithoutEscapedDisplayControls(std::string_view text, std::string& storage,
                                               bool starts_escaped = false, bool ends_open = false);

// The values Screen finds in `text` (every action's), each with how often it appears.
std::map<std::string, int> ValuesFound(std::string_view text, const GuardConfig& config);
// The type of a value `reading` holds (not allowed) more often than `shown` counts it, empty when
// none: a value a client reads that the text as it is does not show.
std::string NewValue(std::string_view reading, const std::map<std::string, int>& shown,
                     const GuardConfig& config);

}  // namespace pillar::guard
