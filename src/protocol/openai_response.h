// OpenAI-compatible response bodies: what pillar writes itself (errors in OpenAI's shape, the
// model list, and the simulated upstream's completions, chunks and embeddings) and what it reads
// of an upstream's (the usage it charges).
//
//   std::string body = OpenAiErrorBody("model 'x' not found", "invalid_request_error",
//                                      "model_not_found");
//   absl::StatusOr<TokenUsage> usage = ParseUsage(upstream_body);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::protocol {

struct TokenUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

// {"error":{"message":...,"type":...,"param":null,"code":...}}; an empty `code` is null.
std::string OpenAiErrorBody(std::string_view message, std::string_view type, std::string_view code);

struct ListedModel {
  std::string id;
  int64_t created = 0;  // Unix seconds
  std::string owned_by;
};
// {"object":"list","data":[{"id":...,"object":"model","created":...,"owned_by":...}, ...]}
std::string ModelListBody(const std::vector<ListedModel>& models);

struct Completion {
  std::string id;  // "chatcmpl-..."
  std::string model;
  int64_t created = 0;
  std::vector<std::string> choices;  // the text of each choice
  std::string finish_reason = "stop";
  TokenUsage usage;
};
// A chat.completion object (the assistant's message in each choice).
std::string ChatCompletionBody(const Completion& completion);
// A text_completion object (POST /v1/completions).
std::string TextCompletionBody(const Completion& completion);

// One server-sent event of a chat stream: "data: {chat.completion.chunk}\n\n". The first chunk
// of a choice carries the role; a chunk with a finish reason ends the choice.
std::string ChatChunkEvent(std::string_view id, std::string_view model, int64_t created,
                           int64_t index, std::string_view content, bool first,
                           std::string_view finish_reason);
// One event of a text completion stream (POST /v1/completions with "stream": true).
std::string TextChunkEvent(std::string_view id, std::string_view model, int64_t created,
                           int64_t index, std::string_view text, std::string_view finish_reason);
// The usage chunk a stream ends with when the client asked for it (empty choices); of a chat
// stream, or (chat false) of a text completion stream.
std::string UsageChunkEvent(std::string_view id, std::string_view model, int64_t created,
                            const TokenUsage& usage, bool chat = true);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],...}
// `base64`: each embedding as the base64 of its little-endian float32 values (encoding_format
// "base64").
std::string EmbeddingsBody(std::string_view model, const std::vector<std::vector<float>>& vectors,
                           const TokenUsage& usage, bool base64 = false);

// The "usage" member of a completion or of a stream's last chunk. NotFound when there is none;
// InvalidArgument when it is malformed (negative, not integers).
[[nodiscard]] absl::StatusOr<TokenUsage> ParseUsage(std::string_view json);

// One event of an upstream's stream (its data, not [DONE]), checked before it goes on: a JSON
// object with a "choices" array and no "error" member; the usage when it carries one (the usage
// chunk, whose choices are empty). InvalidArgument saying what is wrong.
struct StreamChunk {
  bool usage_only = false;  // no choices: the usage chunk
  std::optional<TokenUsage> usage;
};
[[nodiscard]] absl::StatusOr<StreamChunk> CheckStreamChunk(std::string_view data);

struct ReplyUsage {
  TokenUsage usage;
  bool reported = false;  // the reply had a "usage"
};
// An upstream's 200 to a call, checked before it goes to the client: a JSON object holding its
// "choices" (embeddings: its "data") array and no "error" member (a 200 with an error inside is
// a failure); its usage when it reports one (a malformed one is an error). InvalidArgument
// saying what is wrong.
[[nodiscard]] absl::StatusOr<ReplyUsage> CheckGeneratedReply(std::string_view body,
                                                             bool embeddings);

}  // namespace pillar::protocol
