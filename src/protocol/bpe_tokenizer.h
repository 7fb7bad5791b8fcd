// A byte-pair-encoding tokenizer's count of a text's tokens, from a vocabulary in tiktoken's
// format (one "<base64 of the token's bytes> <rank>" per line; cl100k_base.tiktoken,
// o200k_base.tiktoken and the files of models trained with tiktoken). A language model whose
// version directory holds `tokenizer.tiktoken` has its prompts counted with it on arrival
// (docs/protocol.md), which token limits reserve; the estimator (token_estimate.h) counts the
// others.
//
//   PILLAR_ASSIGN_OR_RETURN(auto bpe, BpeTokenizer::Parse(file_text, "tokenizer.tiktoken"));
//   int64_t n = bpe->Count("Hello, world!");   // 4 with cl100k_base
//
// The text is first split as cl100k_base splits it (contractions, runs of letters with the
// character before them, up to three digits, runs of other symbols, line breaks and spaces),
// then each piece is merged pair by pair, the lowest rank first, as tiktoken does. A piece
// longer than 64 bytes is counted in 64-byte slices, which keeps the merge's cost linear in the
// text (a merge is quadratic in its piece) at the price of a token or so per slice.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace pillar::protocol {

class BpeTokenizer {
 public:
  static constexpr std::string_view kFileName = "tokenizer.tiktoken";
  static constexpr size_t kMaxPieceBytes = 64;

  // InvalidArgument naming `source` and the line that is not "<base64> <rank>", a rank or a
  // token that appears twice, or a vocabulary without all 256 single bytes (which every text
  // needs to be encodable).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const BpeTokenizer>> Parse(
      std::string_view text, std::string_view source);

  int64_t Count(std::string_view text) const;
  size_t vocabulary_size() const { return ranks_.size(); }

 private:
  BpeTokenizer() = default;
  int64_t CountPiece(std::string_view piece) const;
  absl::flat_hash_map<std::string, uint32_t> ranks_;
};

}  // namespace pillar::protocol
