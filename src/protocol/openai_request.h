// OpenAI-compatible request bodies (chat completions, completions, embeddings): what pillar
// needs to know of them (the model; the text to screen and count; streaming; the caps), checked
// strictly, with the body itself kept for the upstream. Fields pillar does not read (tools,
// response_format, logprobs, ...) pass through to the upstream unchanged; the fields it reads
// must have their documented types, and a duplicated top-level key is refused (an upstream that
// takes the last "model" or "messages" must not see a different request than the one pillar
// authorized and screened).
//
//   absl::StatusOr<ChatRequest> chat = ParseChatRequest(body, limits);
//   std::string upstream_body = RewriteForUpstream(body, "llama-3-8b", /*include_usage=*/true);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::protocol {

struct OpenAiLimits {
  size_t max_messages = 1024;
  int64_t max_n = 128;           // choices per request (a model's [generation] max_n is lower)
  int64_t max_tokens = 1 << 20;  // the largest max_tokens a request may ask for
  size_t max_stop = 4;           // as OpenAI's API allows
  size_t max_inputs = 2048;      // embeddings inputs (OpenAI's own limit)
  size_t max_nesting = 64;
};

struct ChatMessage {
  std::string role;  // system, developer, user, assistant, tool, function
  // The text of the message: its content string, or its text parts joined by newlines. Other
  // parts (images, audio) are not text and are counted in `other_parts`.
  std::string text;
  size_t other_parts = 0;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int64_t> max_tokens;  // the larger of max_tokens and max_completion_tokens
  int64_t n = 1;
};

struct CompletionRequest {
  std::string model;
  std::vector<std::string> prompts;  // a string prompt is one
  bool stream = false;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;
  int64_t n = 1;
};

struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> inputs;  // a string input is one
  // encoding_format "base64" (what the official clients ask for by default): each embedding as
  // the base64 of its little-endian float32 values; else "float", arrays of numbers.
  bool base64 = false;
};

// InvalidArgument naming the field (e.g. "messages[2].role must be one of ...") when the body is
// not a request pillar can serve.
[[nodiscard]] absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body,
                                                           const OpenAiLimits& limits);
[[nodiscard]] absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                                       const OpenAiLimits& limits);
[[nodiscard]] absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body,
                                                                       const OpenAiLimits& limits);

// The body as the upstream gets it: every member as it came (minified), but "model" set to
// `upstream_model` and, when `include_usage` (a stream whose usage pillar counts),
// "stream_options" with "include_usage": true, and "max_tokens" when `max_tokens` is given (the
// model's default, for a request that named none). `body` must have parsed with one of the above.
[[nodiscard]] absl::StatusOr<std::string> RewriteForUpstream(
    std::string_view body, std::string_view upstream_model, bool include_usage,
    std::optional<int64_t> max_tokens = std::nullopt);

}  // namespace pillar::protocol
