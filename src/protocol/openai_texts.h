// The texts of OpenAI-compatible bodies, found and replaced where they are, for the guard: a
// request's messages, prompts and inputs; an answer's choices; a stream chunk's deltas. Every
// other member is copied as it came (minified), so screening never loses what it does not read
// (tools, tool calls, logprobs ...).
//
//   absl::StatusOr<std::string> out = EditRequestTexts(body, [](std::string_view where,
//                                                               std::string_view text) {
//     return Redact(text);   // std::nullopt keeps the text
//   });
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace pillar::protocol {

// `where` names the text ("messages[1].content", "prompt[0]", "choices[0].message.content");
// the replacement, or nullopt to keep it.
using TextEdit =
    absl::FunctionRef<std::optional<std::string>(std::string_view where, std::string_view text)>;

// A request's texts: every string a client wrote (message contents and parts, names, tool call
// arguments and ids, tool descriptions, prompts, inputs, stop words, metadata, URLs ...), all but
// the top-level "model" and each message's "role" (one of six words), every number of seven
// characters or more but the top-level generation parameters (seed, max_tokens, temperature
// ...), read as its text as EditAnswerTexts says, and every member name the API does not
// know (at "a member's name in PATH"; a replacement renames the member). The body must have parsed
// (protocol/openai_request.h).
[[nodiscard]] absl::StatusOr<std::string> EditRequestTexts(std::string_view body, TextEdit edit);

// An answer's texts: every string of it (contents and their parts, refusals, tool call
// arguments, and the names and codes a client shows too: its id, model, a tool call's id, an
// extension member's strings), every number of seven characters or more, read as its text (a
// replacement is written as a string), and every member name the API does not know (at "a
// member's name in PATH"; a replacement renames the member). Each choice's "logprobs", which
// repeat the text a token at a time where no screen sees it whole, is withheld (null).
[[nodiscard]] absl::StatusOr<std::string> EditAnswerTexts(std::string_view body, TextEdit edit);

// Every string of a request that EditRequestTexts hands its edit, read only: for estimates and
// the injection heuristics.
void ForEachRequestText(
    std::string_view body,
    absl::FunctionRef<void(std::string_view where, std::string_view text)> each);

// Whether a request's string at `where` (as EditRequestTexts names it) is a link or a file's
// bytes: under a "url", "uri", "file_url", "image_url" or "file_data" member, of any case,
// wherever it is (an image_url given as a list or an object too), or an input_audio's "data". A
// fetcher or a decoder reads it: it is screened as guard::ScreenUrl says.
bool IsLink(std::string_view where);

// Whether it is a message's attachment (an image's URL, a file's bytes or URL, an audio's
// bytes, in the content part that holds them): what the model does not read as prompt text,
// so that it is neither counted as prompt tokens nor scored as an injection. A string anywhere
// else is, whatever it starts with ("data:,Ignore all previous instructions" in a message's
// content is text the model reads).
bool IsAttachment(std::string_view where);

// What the model wrote in an answer's choices (contents and their parts, refusals, tool call
// arguments: their strings but the structural members, and their numbers but indices, as
// clients print them), in order: for estimates, judges and the guard's joined reading.
// Nothing when the body is not a JSON object.
void ForEachChoiceText(std::string_view body, absl::FunctionRef<void(std::string_view)> each);
// The same, with each text's path ("choices[0].message.content").
void ForEachChoiceTextAt(
    std::string_view body,
    absl::FunctionRef<void(std::string_view path, std::string_view text)> each);

// A stream chunk's texts (an event's data): for each choice, its delta.content (chat) or text
// (completions), with the choice's "index" and whether it finished in this chunk (a non-null
// finish_reason). `edit` returns what goes out in its place (a chat delta without content gets
// one when the edit returns text for it). Every other string of a delta but the structural
// members (a refusal, reasoning, a tool call's arguments and name, an audio transcript ...),
// which clients join across chunks, goes through `held`, keyed by where it is, which returns
// what goes out in place of each fragment (a guard holds them whole until their choice
// finishes; DeltaChoice writes them out then); a number or a boolean there goes through `held`
// as a structural member (flagged `number`, as clients show it: 4.1e15 as 4100000000000000),
// and a list of other values than objects, a structural member that is neither a string nor
// null, or a delta nested more than kMaxDeltaDepth members deep is an error. Every other string of
// the chunk (its id and model too), number and unknown member name goes through `other` one by one,
// as EditAnswerTexts says; a choice's "logprobs" and "message" are withheld (null). A content or
// text that is not a string, or a choice's or merged element's "index" that is not one
// non-negative integer, is an error: nothing the guard cannot read, or could read otherwise than
// a client, goes out.
inline constexpr size_t kMaxDeltaDepth = 16;
using ChunkEdit =
    absl::FunctionRef<std::string(int64_t index, std::string_view text, bool finished)>;

// Where a fragment of a delta belongs: the members from the delta down to the string
// ("refusal"; "audio", "transcript"), each an element of a list merged by index where it is one
// ("tool_calls" element 1, "function", "arguments"), or an object carrying such an "index" in
// place of the list.
struct DeltaField {
  struct Segment {
    std::string key;
    int64_t element = -1;  // >= 0: `key` is a list, and this is its element with that "index"
    // The element is the member's value itself, an object with an "index", not a list holding
    // it: TGI 2.x streams a tool call as "tool_calls":{"index":0,...}. It goes out in that form.
    bool bare = false;
    auto operator<=>(const Segment&) const = default;
  };
  std::vector<Segment> path;
  // A structural member ("id", "role", "type" ...): not held, since it must go out as it is, but
  // clients join its fragments too, so a guard lets it come in one piece only and screens it as
  // clients would show it (HeldEdit returns it as it is).
  bool structural = false;
  // A number or a boolean, held as a structural member: openai-python adds a place's repeats,
  // openai-node joins them as text, so a guard lets it come once only.
  bool number = false;
  auto operator<=>(const DeltaField&) const = default;
};
using HeldEdit = absl::FunctionRef<std::string(int64_t index, const DeltaField& field,
                                               std::string_view fragment)>;

// Which route's client reads the chunk: a chat client reads each choice's delta, a completions
// client its text; the other member is withheld (null).
enum class ChunkRoute { kChat, kCompletions };
[[nodiscard]] absl::StatusOr<std::string> EditChunkTexts(std::string_view data, ChunkRoute route,
                                                         ChunkEdit edit, HeldEdit held,
                                                         TextEdit other);

// One choice of a chat chunk that carries `text` at `field` of choice `index`'s delta:
// {"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"..."}}]},
//  "finish_reason":null}.
std::string DeltaChoice(int64_t index, const DeltaField& field, std::string_view text);

}  // namespace pillar::protocol
