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

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace pillar::protocol {

// `where` names the text ("messages[1].content", "prompt[0]", "choices[0].message.content");
// the replacement, or nullopt to keep it.
using TextEdit =
    absl::FunctionRef<std::optional<std::string>(std::string_view where, std::string_view text)>;

// A request's texts: each message's content (a string, or the "text" of its parts), "prompt"
// and "input" (a string, or each string of an array). The body must have parsed
// (protocol/openai_request.h).
[[nodiscard]] absl::StatusOr<std::string> EditRequestTexts(std::string_view body, TextEdit edit);

// An answer's texts: each choice's message.content (chat) or text (completions).
[[nodiscard]] absl::StatusOr<std::string> EditAnswerTexts(std::string_view body, TextEdit edit);

// A stream chunk's texts (an event's data): for each choice, its delta.content (chat) or text
// (completions), with the choice's "index" and whether it finished in this chunk (a non-null
// finish_reason). `edit` returns what goes out in its place (a chat delta without content gets
// one when the edit returns text for it).
using ChunkEdit =
    absl::FunctionRef<std::string(int64_t index, std::string_view text, bool finished)>;
[[nodiscard]] absl::StatusOr<std::string> EditChunkTexts(std::string_view data, ChunkEdit edit);

}  // namespace pillar::protocol
