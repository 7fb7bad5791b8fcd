#include "audit/chain_hasher.h"

namespace pillar::audit {

static_assert(format::kChainBytes == Sha256Hasher::kDigestBytes);

Chain ChainHasher::Link(const Chain& previous, std::string_view payload) {
  hasher_.Update(std::string_view(reinterpret_cast<const char*>(previous.data()), previous.size()));
  hasher_.Update(payload);
  return hasher_.Finish();
}

std::string ChainHex(const Chain& chain) {
  std::string hex;
  AppendChainHex(hex, chain);
  return hex;
}

void AppendChainHex(std::string& out, const Chain& chain) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const size_t at = out.size();
  out.resize(at + format::kChainHexChars);
  char* hex = out.data() + at;
  for (size_t i = 0; i < chain.size(); ++i) {
    hex[2 * i] = kDigits[chain[i] >> 4];
    hex[2 * i + 1] = kDigits[chain[i] & 15];
  }
}

namespace {

// Lowercase hex digit values; 0xff for every other byte. Verification parses one chain per
// record, so this is on the path that must run at a million records a second.
constexpr std::array<uint8_t, 256> MakeNibbles() {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 0xff;
  for (int c = '0'; c <= '9'; ++c) t[size_t(c)] = uint8_t(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[size_t(c)] = uint8_t(c - 'a' + 10);
  return t;
}
constexpr std::array<uint8_t, 256> kNibbles = MakeNibbles();

}  // namespace

bool ParseChainHex(std::string_view hex, Chain* chain) {
  if (hex.size() != format::kChainHexChars) return false;
  uint8_t bad = 0;
  for (size_t i = 0; i < chain->size(); ++i) {
    const uint8_t hi = kNibbles[static_cast<unsigned char>(hex[2 * i])];
    const uint8_t lo = kNibbles[static_cast<unsigned char>(hex[2 * i + 1])];
    bad |= hi | lo;
    (*chain)[i] = uint8_t(hi << 4 | (lo & 0x0f));
  }
  return (bad & 0xf0) == 0;
}

}  // namespace pillar::audit
