#include "audit/chain_hasher.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace pillar::audit {

ChainHasher::ChainHasher()
    : ctx_(EVP_MD_CTX_new()), md_(EVP_MD_fetch(nullptr, "SHA256", nullptr)) {
  // Without SHA-256 no record can be written or checked; pretending otherwise would be worse.
  if (ctx_ == nullptr || md_ == nullptr) std::abort();
}

ChainHasher::~ChainHasher() {
  EVP_MD_CTX_free(ctx_);
  EVP_MD_free(md_);
}

Chain ChainHasher::Link(const Chain& previous, std::string_view payload) {
  Chain next;
  unsigned int size = 0;
  if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1 ||
      EVP_DigestUpdate(ctx_, previous.data(), previous.size()) != 1 ||
      EVP_DigestUpdate(ctx_, payload.data(), payload.size()) != 1 ||
      EVP_DigestFinal_ex(ctx_, next.data(), &size) != 1 || size != next.size()) {
    std::abort();
  }
  return next;
}

std::string ChainHex(const Chain& chain) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(format::kChainHexChars, '0');
  for (size_t i = 0; i < chain.size(); ++i) {
    hex[2 * i] = kDigits[chain[i] >> 4];
    hex[2 * i + 1] = kDigits[chain[i] & 15];
  }
  return hex;
}

bool ParseChainHex(std::string_view hex, Chain* chain) {
  if (hex.size() != format::kChainHexChars) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < chain->size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*chain)[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

}  // namespace pillar::audit
