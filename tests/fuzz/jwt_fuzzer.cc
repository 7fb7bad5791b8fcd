// Fuzzes JWT verification and JWKS parsing: tokens come from anyone on the network, and the
// JWKS file from an identity provider. The first byte picks what the rest of the input is:
//   0: a token, verified as received (header, base64 and signature paths);
//   1: a claims object, signed here with the trusted key, so the claim checks see every shape;
//   2: a JWKS document.
#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/crypto.h"
#include "identity/jwt_verifier.h"

namespace {

using pillar::identity::Jwks;
using pillar::identity::JwtOptions;
using pillar::identity::JwtVerifier;

constexpr unsigned char kPrivate[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                        12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                        23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

struct Fixture {
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, kPrivate, 32);
  std::unique_ptr<JwtVerifier> verifier;
  Fixture() {
    unsigned char pub[32];
    size_t len = sizeof pub;
    EVP_PKEY_get_raw_public_key(key, pub, &len);
    std::string jwks =
        R"({"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":")" +
        pillar::Base64UrlEncode(std::string_view(reinterpret_cast<char*>(pub), len)) + "\"}]}";
    JwtOptions options;
    options.issuer = "idp";
    options.audiences = {"pillar"};
    options.tenant_claim = "org";
    options.attribute_claims = {{"clearances", "clr"}};
    verifier = std::make_unique<JwtVerifier>(options, *Jwks::Parse(jwks));
  }
  std::string Sign(std::string_view claims) const {
    std::string input = pillar::Base64UrlEncode(R"({"alg":"EdDSA","kid":"k"})") + "." +
                        pillar::Base64UrlEncode(claims);
    unsigned char sig[64];
    size_t len = sizeof sig;
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key);
    EVP_DigestSign(ctx, sig, &len, reinterpret_cast<const unsigned char*>(input.data()),
                   input.size());
    EVP_MD_CTX_free(ctx);
    return input + "." +
           pillar::Base64UrlEncode(std::string_view(reinterpret_cast<char*>(sig), len));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fixture;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr int64_t kNow = 1'800'000'000'000'000;
  switch (data[0] % 3) {
    case 0:
      (void)fixture.verifier->Verify(rest, kNow);
      break;
    case 1: {
      auto who = fixture.verifier->Verify(fixture.Sign(rest), kNow);
      // Whatever was accepted must have a subject.
      if (who.ok() && (*who)->id.size() <= 4) __builtin_trap();
      break;
    }
    case 2: {
      auto jwks = Jwks::Parse(rest);
      if (jwks.ok() && (*jwks)->keys().empty()) __builtin_trap();  // never an empty key set
      break;
    }
  }
  return 0;
}
