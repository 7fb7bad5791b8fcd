// Test-only JWT issuer: makes RS256, ES256 and EdDSA key pairs, publishes them as JWKs, and
// signs tokens (including deliberately broken ones) the way an identity provider would.
//
//   JwtSigner rsa = JwtSigner::Make(JwtSigner::kRs256, "k1");
//   std::string jwks = JwksJson({&rsa});
//   std::string token = rsa.Sign(R"({"sub":"alice","exp":...})");
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

typedef struct evp_pkey_st EVP_PKEY;

namespace pillar::testing {

class JwtSigner {
 public:
  enum Algorithm { kRs256, kEs256, kEdDsa };
  static JwtSigner Make(Algorithm algorithm, std::string kid);

  // The public key as a JWK object.
  std::string Jwk() const;
  // A compact JWS over `claims` with this key; `header` overrides the default header.
  std::string Sign(std::string_view claims, std::string header = "") const;
  // The public key in PEM (what an attacker would use as an HMAC secret).
  std::string PublicPem() const;
  const std::string& kid() const { return kid_; }
  std::string_view alg() const;

 private:
  Algorithm algorithm_;
  std::string kid_;
  std::shared_ptr<EVP_PKEY> key_;
};

std::string JwksJson(const std::vector<const JwtSigner*>& signers);
// HS256 over the two encoded parts with `secret`: the algorithm-confusion attack.
std::string SignHs256(std::string_view header, std::string_view claims, std::string_view secret);
std::string Base64Url(std::string_view bytes);

}  // namespace pillar::testing
