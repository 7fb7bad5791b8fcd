// How many tokens a text is, estimated on arrival for token limits (the upstream's own count, its
// "usage", is what is charged afterwards). Close to what byte-pair-encoding tokenizers of the
// GPT-4 and Llama 3 families produce on English and Portuguese prose, without their vocabularies:
// a run of letters is a token per six letters (at least one), a run of digits a token per three
// digits, each other ASCII symbol a token, each non-ASCII character a token; whitespace joins the
// word after it.
//
//   int64_t n = EstimateTokens("Hello, world!");   // 4
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "protocol/openai_request.h"

namespace pillar::protocol {

int64_t EstimateTokens(std::string_view text);

// The estimated tokens of a stream chunk's choice texts (an event's data): each choice's delta
// strings but its role, types and ids, or a completion's text. What a stream that ends before
// its usage chunk generated is this, added up. 0 for anything but a JSON object.
int64_t EstimateChunkTokens(std::string_view data);

}  // namespace pillar::protocol
