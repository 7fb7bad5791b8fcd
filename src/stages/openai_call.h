// The body of an OpenAI-compatible call (chat completions, completions, embeddings), read by the
// route stage: the model it names is what the request is routed and authorized to, so the body
// is read (strictly: protocol/openai_request.h) before the model is resolved.
//
//   absl::Status read = DecodeOpenAiCall(ex, limits);   // sets ex.model_name and ex.generate
#pragma once

#include "absl/status/status.h"
#include "pipeline/exchange.h"
#include "protocol/bpe_tokenizer.h"
#include "protocol/openai_request.h"

namespace pillar::stages {

// InvalidArgument (400, in OpenAI's error shape) naming the field when the body is not a call
// pillar serves; NotFound when the model it names cannot be a model's name here.
[[nodiscard]] absl::Status DecodeOpenAiCall(pipeline::Exchange& ex,
                                            const protocol::OpenAiLimits& limits);

// The call's prompt counted again with its model's tokenizer (the version's tokenizer.tiktoken),
// in place of the estimate it arrived with: what token limits reserve and, for an answer
// without a usage, what is charged.
// The first kTokenizerBudgetBytes of the call's text are counted with it, the rest estimated.
inline constexpr size_t kTokenizerBudgetBytes = 64 * 1024;
void CountPromptTokens(const protocol::BpeTokenizer& tokenizer, pipeline::Exchange& ex);

}  // namespace pillar::stages
