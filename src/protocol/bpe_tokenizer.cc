#include "protocol/bpe_tokenizer.h"

#include <re2/re2.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "common/strings.h"

namespace pillar::protocol {
namespace {

// cl100k_base's split, without its one look-ahead (`\s+(?!\S)`), which RE2 does not have: a run
// of blanks before a word gives its last blank to the word, below.
const RE2& Splitter() {
  static const RE2* re =
      new RE2(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN{1,3}| ?[^\s\pL\pN]+[\r\n]*|)"
              R"(\s*[\r\n]+|\s+)");
  return *re;
}

bool Blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

absl::StatusOr<std::shared_ptr<const BpeTokenizer>> BpeTokenizer::Parse(std::string_view text,
                                                                        std::string_view source) {
  std::shared_ptr<BpeTokenizer> bpe(new BpeTokenizer);
  absl::flat_hash_map<uint32_t, bool> ranks_seen;
  size_t line_number = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    std::string token;
    uint32_t rank = 0;
    if (space == std::string_view::npos ||
        !absl::Base64Unescape(absl::string_view(line.data(), space), &token) || token.empty() ||
        !absl::SimpleAtoi(absl::string_view(line.data() + space + 1, line.size() - space - 1),
                          &rank)) {
      return absl::InvalidArgumentError(
          StrCat(source, ":", line_number, ": expected \"<base64 of a token> <rank>\""));
    }
    if (!ranks_seen.emplace(rank, true).second || !bpe->ranks_.emplace(token, rank).second) {
      return absl::InvalidArgumentError(
          StrCat(source, ":", line_number, ": the rank or the token appears twice"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (!bpe->ranks_.contains(std::string(1, char(b)))) {
      return absl::InvalidArgumentError(StrCat(source, ": the vocabulary lacks the single byte ", b,
                                               ", without which some texts cannot be encoded"));
    }
  }
  return std::shared_ptr<const BpeTokenizer>(std::move(bpe));
}

int64_t BpeTokenizer::CountPiece(std::string_view piece) const {
  if (ranks_.contains(absl::string_view(piece.data(), piece.size()))) return 1;
  // Parts of the piece as byte offsets; the pair whose bytes together have the lowest rank is
  // merged until no pair is in the vocabulary (tiktoken's byte_pair_merge).
  std::vector<size_t> starts;
  for (size_t i = 0; i <= piece.size(); ++i) starts.push_back(i);
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  auto rank_at = [&](size_t i) -> uint32_t {  // of parts i and i+1 together
    if (i + 2 >= starts.size()) return kNone;
    const std::string_view pair = piece.substr(starts[i], starts[i + 2] - starts[i]);
    auto it = ranks_.find(absl::string_view(pair.data(), pair.size()));
    return it == ranks_.end() ? kNone : it->second;
  };
  std::vector<uint32_t> ranks(starts.size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = rank_at(i);
  while (starts.size() > 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < ranks.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    starts.erase(starts.begin() + long(best) + 1);
    ranks.erase(ranks.begin() + long(best) + 1);
    ranks[best] = rank_at(best);
    if (best > 0) ranks[best - 1] = rank_at(best - 1);
  }
  return int64_t(starts.size()) - 1;
}

int64_t BpeTokenizer::Count(std::string_view text) const {
  int64_t tokens = 0;
  re2::StringPiece rest(text.data(), text.size());
  re2::StringPiece match;
  while (!rest.empty()) {
    if (!Splitter().Match(rest, 0, rest.size(), RE2::ANCHOR_START, &match, 1) || match.empty()) {
      // Not valid UTF-8 where RE2 stopped: a byte on its own.
      match = rest.substr(0, 1);
    }
    std::string_view piece(match.data(), match.size());
    // A run of blanks (no line break: those are split above) followed by something else keeps
    // its last blank for what follows.
    if (piece.size() > 1 && piece.size() < rest.size() && !Blank(rest[piece.size()]) &&
        std::all_of(piece.begin(), piece.end(),
                    [](char c) { return Blank(c) && c != '\n' && c != '\r'; })) {
      piece.remove_suffix(1);
    }
    for (size_t at = 0; at < piece.size(); at += kMaxPieceBytes) {
      tokens += CountPiece(piece.substr(at, kMaxPieceBytes));
    }
    rest.remove_prefix(piece.size());
  }
  return tokens;
}

}  // namespace pillar::protocol
