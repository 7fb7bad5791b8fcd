#include "stages/openai_call.h"

#include <algorithm>

#include "common/strings.h"
#include "guard/screen.h"
#include "models/model_config.h"
#include "protocol/openai_texts.h"
#include "protocol/token_estimate.h"

namespace pillar::stages {
namespace {

int64_t EstimateAll(const std::vector<std::string>& texts) {
  int64_t tokens = 0;
  for (const std::string& text : texts) tokens += protocol::EstimateTokens(text);
  return tokens;
}

// A prompt's tokens: every string of the request a model may read (its messages' texts and
// names, tool calls, tool descriptions and schemas, a completion's suffix ...; of a message's
// attachments, protocol::IsAttachment, only the text a text file holds), and for a chat the few
// tokens templates add around each message and its role (3 each, 3 for the reply, as OpenAI
// documents its count). Counting only the messages' texts let a prompt hide most of its size from
// the limits in a tool's description.
int64_t CountRequestTokens(std::string_view body,
                           const std::vector<protocol::ChatMessage>* messages,
                           absl::FunctionRef<int64_t(std::string_view)> count) {
  int64_t tokens = 0;
  if (messages != nullptr) {
    tokens = 3;
    for (const protocol::ChatMessage& m : *messages) tokens += 3 + count(m.role);
  }
  protocol::ForEachRequestText(body, [&](std::string_view where, std::string_view text) {
    // An attachment counts for the text it holds, if it holds text (a text file).
    tokens +=
        count(protocol::IsAttachment(where) ? guard::AttachmentText(text) : std::string(text));
  });
  return tokens;
}

}  // namespace

[[nodiscard]] absl::Status DecodeOpenAiCall(pipeline::Exchange& ex,
                                            const protocol::OpenAiLimits& limits) {
  runtime::GenerateRequest call;
  switch (ex.operation) {
    case pipeline::Operation::kChatCompletions: {
      absl::StatusOr<protocol::ChatRequest> chat = protocol::ParseChatRequest(ex.body, limits);
      if (!chat.ok()) return chat.status();
      call.route = runtime::OpenAiRoute::kChatCompletions;
      call.model = std::move(chat->model);
      call.stream = chat->stream;
      call.include_usage = chat->include_usage;
      call.max_tokens = chat->max_tokens;
      call.n = chat->n;
      call.prompt_tokens = CountRequestTokens(ex.body, &chat->messages, protocol::EstimateTokens);
      break;
    }
    case pipeline::Operation::kCompletions: {
      absl::StatusOr<protocol::CompletionRequest> completion =
          protocol::ParseCompletionRequest(ex.body, limits);
      if (!completion.ok()) return completion.status();
      call.route = runtime::OpenAiRoute::kCompletions;
      call.model = std::move(completion->model);
      call.stream = completion->stream;
      call.include_usage = completion->include_usage;
      call.max_tokens = completion->max_tokens;
      call.n = completion->n;
      call.prompts = int64_t(completion->prompts.size());
      call.prompt_tokens = CountRequestTokens(ex.body, nullptr, protocol::EstimateTokens);
      break;
    }
    case pipeline::Operation::kEmbeddings: {
      absl::StatusOr<protocol::EmbeddingsRequest> embeddings =
          protocol::ParseEmbeddingsRequest(ex.body, limits);
      if (!embeddings.ok()) return embeddings.status();
      call.route = runtime::OpenAiRoute::kEmbeddings;
      call.model = std::move(embeddings->model);
      call.inputs = int64_t(embeddings->inputs.size());
      call.base64_embeddings = embeddings->base64;
      call.prompt_tokens = EstimateAll(embeddings->inputs);
      break;
    }
    default:
      return absl::InternalError("not an OpenAI-compatible call");
  }
  // A name no model can have is answered like a model nobody may see, and kept out of the logs'
  // model field, which holds only names a model could have.
  if (!models::IsValidModelName(call.model)) {
    return absl::NotFoundError("The model does not exist or you do not have access to it.");
  }
  ex.model_name = call.model;
  ex.estimated_prompt_tokens = call.prompt_tokens;
  // n choices for each prompt of a completion (a list of prompts is answered prompt by prompt).
  ex.choices_asked = std::max<int64_t>(call.n, 1) * std::max<int64_t>(call.prompts, 1);
  call.body = ex.body;
  ex.generate = std::move(call);
  return absl::OkStatus();
}

void CountPromptTokens(const protocol::BpeTokenizer& tokenizer, pipeline::Exchange& ex) {
  if (!ex.generate.has_value()) return;
  runtime::GenerateRequest& call = *ex.generate;
  // This runs before the limits are checked, on the event loop: the tokenizer counts the
  // first 64 KiB of the call's text, the estimator the rest, so that no body (up to the body
  // limit) costs more than a few milliseconds, whoever sends it.
  size_t budget = kTokenizerBudgetBytes;
  auto count = [&](std::string_view text) -> int64_t {
    size_t cut = std::min(text.size(), budget);
    while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
      --cut;  // not inside a UTF-8 character
    }
    budget -= cut;
    return tokenizer.Count(text.substr(0, cut)) + protocol::EstimateTokens(text.substr(cut));
  };
  auto count_all = [&](const std::vector<std::string>& texts) {
    int64_t tokens = 0;
    for (const std::string& text : texts) tokens += count(text);
    return tokens;
  };
  // The body parsed when the call arrived, so it parses again; if not, the estimate stands.
  switch (call.route) {
    case runtime::OpenAiRoute::kChatCompletions:
      if (auto chat = protocol::ParseChatRequest(call.body, {}); chat.ok()) {
        call.prompt_tokens = CountRequestTokens(call.body, &chat->messages, count);
      }
      break;
    case runtime::OpenAiRoute::kCompletions:
      if (auto completion = protocol::ParseCompletionRequest(call.body, {}); completion.ok()) {
        call.prompt_tokens = CountRequestTokens(call.body, nullptr, count);
      }
      break;
    case runtime::OpenAiRoute::kEmbeddings:
      if (auto embeddings = protocol::ParseEmbeddingsRequest(call.body, {}); embeddings.ok()) {
        call.prompt_tokens = count_all(embeddings->inputs);
      }
      break;
  }
  ex.estimated_prompt_tokens = call.prompt_tokens;
}

}  // namespace pillar::stages
