// The only file that calls OpenSSL's deprecated SHA-256 functions (see sha256.h for why).
#define OPENSSL_SUPPRESS_DEPRECATED
#include "common/sha256.h"

#include <openssl/crypto.h>

#include <cstdio>
#include <cstdlib>

namespace pillar {
namespace {

// These cannot fail on a valid context; a failure is a broken OpenSSL, not bad input.
void Check(int ok) {
  if (ok != 1) {
    std::fputs("pillar: OpenSSL's SHA-256 failed; refusing to continue\n", stderr);
    std::abort();
  }
}

}  // namespace

Sha256Hasher::Sha256Hasher() { Check(SHA256_Init(&state_)); }

Sha256Hasher::~Sha256Hasher() { OPENSSL_cleanse(&state_, sizeof(state_)); }

void Sha256Hasher::Update(std::string_view data) {
  Check(SHA256_Update(&state_, data.data(), data.size()));
}

Sha256Hasher::Digest Sha256Hasher::Finish() {
  Digest digest;
  Check(SHA256_Final(digest.data(), &state_));
  Check(SHA256_Init(&state_));
  return digest;
}

Sha256Hasher::Digest Sha256Hasher::Hash(std::string_view data) {
  Sha256Hasher hasher;
  hasher.Update(data);
  return hasher.Finish();
}

}  // namespace pillar
