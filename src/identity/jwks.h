// A JSON Web Key Set (RFC 7517) of public signing keys, as an OIDC identity provider publishes
// it: RSA (RS256), EC P-256 (ES256) and OKP Ed25519 (EdDSA) keys. Anything else in the set
// (encryption keys, other curves, symmetric keys) is skipped, never trusted.
//
//   absl::StatusOr<std::shared_ptr<const Jwks>> jwks = Jwks::Parse(file_text);
//   const JwksKey* key = (*jwks)->Find("kid-1", JwtAlgorithm::kRs256);
// Immutable once parsed; OpenSSL keys are safe to verify with from many threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace pillar::identity {

enum class JwtAlgorithm { kRs256, kEs256, kEdDsa };
std::string_view JwtAlgorithmName(JwtAlgorithm alg);
// The algorithm JwtAlgorithmName spells `name`; none for any other ("none", HS256, PS256, ...).
std::optional<JwtAlgorithm> JwtAlgorithmNamed(std::string_view name);

struct JwksKey {
  std::string kid;  // may be empty
  JwtAlgorithm algorithm;
  std::shared_ptr<EVP_PKEY> key;
  std::string fingerprint;  // the hex SHA-256 of its DER SubjectPublicKeyInfo
};

class Jwks {
 public:
  // InvalidArgument when the text is not a key set or holds no usable signing key.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const Jwks>> Parse(std::string_view json);

  // The key for `kid` (or, when `kid` is empty, the only key) whose type suits `algorithm`;
  // null when there is none. A key never serves another algorithm than its own type's, which
  // is what stops algorithm confusion (an RSA public key used as an HMAC secret).
  const JwksKey* Find(std::string_view kid, JwtAlgorithm algorithm) const;
  const std::vector<JwksKey>& keys() const { return keys_; }

 private:
  std::vector<JwksKey> keys_;
};

}  // namespace pillar::identity
