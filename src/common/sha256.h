// Incremental SHA-256 on OpenSSL's SHA-256 functions, without the provider layer.
//
//   Sha256Hasher hasher;
//   hasher.Update(header);
//   hasher.Update(body);
//   std::array<uint8_t, 32> digest = hasher.Finish();   // the hasher starts over
//
// Why not EVP: OpenSSL 3's EVP_MD_fetch reads openssl.cnf and builds its algorithm name map the
// first time a process asks for a digest, 0.8 ms measured here, which was a third of the start-up
// of `pillar audit verify` (docs/benchmarks.md, "Command start-up"); and every EVP digest call
// goes through the provider dispatch. The functions used here are the ones OpenSSL's default
// provider itself runs for SHA-256 (the same assembly, SHA-NI where the CPU has it), called
// directly. They are deprecated in OpenSSL 3 in favour of EVP for the sake of swappable
// providers (FIPS); pillar does not offer a FIPS mode, and this file is the one place to change
// if it ever does.
#pragma once

#include <openssl/sha.h>

#include <array>
#include <cstdint>
#include <string_view>

namespace pillar {

class Sha256Hasher {
 public:
  static constexpr size_t kDigestBytes = 32;
  using Digest = std::array<uint8_t, kDigestBytes>;

  Sha256Hasher();
  ~Sha256Hasher();  // wipes the state: it may have hashed a secret
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Update(std::string_view data);
  // The digest of everything given since construction or the last Finish; starts over.
  Digest Finish();

  // One-shot.
  static Digest Hash(std::string_view data);

 private:
  SHA256_CTX state_;
};

}  // namespace pillar
