// Fuzzes the OpenAI-compatible request parsers and the body pillar sends upstream
// (protocol/openai_request.h): request bodies are untrusted. Whatever the bytes, a body that
// parses as a chat request is rewritten into one that parses again, with the upstream's model
// name and the same messages; the estimate of its tokens is never negative.
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/openai_request.h"
#include "protocol/token_estimate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pillar::protocol;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const OpenAiLimits limits;
  (void)ParseCompletionRequest(body, limits);
  (void)ParseEmbeddingsRequest(body, limits);
  absl::StatusOr<ChatRequest> chat = ParseChatRequest(body, limits);
  if (!chat.ok()) return 0;
  absl::StatusOr<std::string> upstream = RewriteForUpstream(body, "upstream-model", chat->stream);
  if (!upstream.ok()) __builtin_trap();
  absl::StatusOr<ChatRequest> again = ParseChatRequest(*upstream, limits);
  if (!again.ok() || again->model != "upstream-model") __builtin_trap();
  if (again->messages.size() != chat->messages.size()) __builtin_trap();
  for (size_t i = 0; i < chat->messages.size(); ++i) {
    if (again->messages[i].text != chat->messages[i].text) __builtin_trap();
  }
  if (chat->stream && !again->include_usage) __builtin_trap();
  return 0;
}
