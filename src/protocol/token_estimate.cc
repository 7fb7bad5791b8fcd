#include "protocol/token_estimate.h"

#include <simdjson.h>

namespace pillar::protocol {
namespace {

// The strings of a delta, but its names and codes, down to a bounded depth.
int64_t DeltaTokens(simdjson::dom::element e, int depth) {
  if (depth > 16) return 0;
  std::string_view text;
  if (e.get(text) == simdjson::SUCCESS) return EstimateTokens(text);
  int64_t tokens = 0;
  simdjson::dom::array list;
  if (e.get(list) == simdjson::SUCCESS) {
    for (simdjson::dom::element item : list) tokens += DeltaTokens(item, depth + 1);
    return tokens;
  }
  simdjson::dom::object members;
  if (e.get(members) != simdjson::SUCCESS) return 0;
  for (auto member : members) {
    if (member.key == "role" || member.key == "type" || member.key == "id") continue;
    tokens += DeltaTokens(member.value, depth + 1);
  }
  return tokens;
}

}  // namespace

int64_t EstimateChunkTokens(std::string_view data) {
  // One parser a thread: a stream's chunks are parsed one after another, each a few hundred
  // bytes, and a parser's buffers are worth keeping.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::array choices;
  if (parser.parse(data.data(), data.size())["choices"].get(choices) != simdjson::SUCCESS) return 0;
  int64_t tokens = 0;
  for (simdjson::dom::element choice : choices) {
    simdjson::dom::element part;
    if (choice["delta"].get(part) == simdjson::SUCCESS) tokens += DeltaTokens(part, 0);
    std::string_view text;
    if (choice["text"].get(text) == simdjson::SUCCESS) tokens += EstimateTokens(text);
  }
  return tokens;
}

int64_t EstimateTokens(std::string_view text) {
  int64_t tokens = 0;
  size_t i = 0;
  const size_t n = text.size();
  auto run = [&](auto in) {
    const size_t start = i;
    while (i < n && in(text[i])) ++i;
    return int64_t(i - start);
  };
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
      const int64_t letters = run([](char x) {
        const unsigned char u = static_cast<unsigned char>(x) | 0x20;
        return u >= 'a' && u <= 'z';
      });
      tokens += (letters + 5) / 6;
    } else if (c >= '0' && c <= '9') {
      tokens += (run([](char x) { return x >= '0' && x <= '9'; }) + 2) / 3;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (c < 0x80) {
      ++tokens;
      ++i;
    } else {
      // One token per character: its lead byte, then its continuation bytes.
      ++tokens;
      ++i;
      while (i < n && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) ++i;
    }
  }
  return tokens;
}

}  // namespace pillar::protocol
