// A whole (not streamed) answer of a language model as its clients read it (guard_stage.cc):
// the checks that its texts, screened one by one, are also clean as clients join them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "guard/guard_config.h"

namespace pillar::stages {

// Why a whole answer cannot go out as the guard reads it, empty when it can: a member named
// twice, more choices than the request asked for (a client printing every choice would show one
// nobody asked for), or choices out of the order of their index (a client that sorts them
// would join their texts in an order the guard did not read).
std::string AnswerShapeError(std::string_view body, int64_t asked);

// What a client that prints an answer's texts back to back shows was screened text by text;
// joined, it is screened again, as redacted, in the order they come and in the order of their
// kinds within each choice (TextRank), each choice on a line of its own. A finding there that
// is not allowed, or a blocking deny rule's match, was made by the joining (a key's halves in a
// choice's reasoning and content, a phone number whose naming word is in the part before it:
// review helpers 73 to 75) and is a block's reason; empty when there is none.
// A 502 when the answer cannot be read as clients join it (ChoiceJoins: too many texts, a
// token longer than a join's window).
[[nodiscard]] absl::StatusOr<std::string> AcrossTexts(std::string_view body,
                                                      const guard::GuardConfig& config);

// The type of a value a client that parses `text` as JSON reads in it (structured outputs, tool
// arguments: its strings decoded, its numbers as clients print them, its keys, each on a line)
// and `text` as it is does not show, empty when none or when `text` is no JSON object or list,
// nor wholly a JSON string or number (review helper-84: {"card":4.111111111111111e15} reads
// 4111111111111111; helper-88: a bare 4.111111111111111e15 too). kDisplayControl when, with
// answer_controls = "strip", what the client reads holds a layout control
// (guard/display_controls.h), which only an escape ShownParsed does not take out can have spelled
// (in a string of JSON in a string).
inline constexpr std::string_view kDisplayControl = "a display control";
std::string ParsedFinding(std::string_view text, const guard::GuardConfig& config);

// Whether clients may parse `text` as JSON: its first byte that is not a blank (to JavaScript's
// trim(): U+00A0, U+FEFF, U+2028 ... too) opens an object or a string, or a list whose next such
// byte begins a value (null, true, false, NaN and Infinity included) or ends it (structured
// outputs, tool arguments; not "[Note]"); nullopt while the bytes that say have not come.
std::optional<bool> OpensJson(std::string_view text);

// `text` as a client that parses it is to be shown: with answer_controls = "strip", a text that
// OpensJson loses the escapes of its display controls (guard::WithoutEscapedDisplayControls), as
// its display controls themselves went. A view of `storage` when it changed, else `text`.
std::string_view ShownParsed(std::string_view text, std::string& storage,
                             const guard::GuardConfig& config);

// Why `text` read as a client that decodes it shows a value the guard did not see, or empty:
// "SECRET spelled with JSON escapes" (guard::EscapedFinding), or "CREDIT_CARD as a client that
// parses the JSON reads it" (ParsedFinding). For each text of an answer, whole or held.
std::string DecodedFinding(std::string_view text, const guard::GuardConfig& config);

}  // namespace pillar::stages
