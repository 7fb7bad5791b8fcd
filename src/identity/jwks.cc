#include "identity/jwks.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>
#include <simdjson.h>
#include <sodium.h>

#include <algorithm>

#include "common/crypto.h"
#include "common/strings.h"

namespace pillar::identity {
namespace {

using PkeyPtr = std::shared_ptr<EVP_PKEY>;

PkeyPtr Wrap(EVP_PKEY* key) { return PkeyPtr(key, EVP_PKEY_free); }

[[nodiscard]] absl::StatusOr<std::string> Field(simdjson::dom::object& object,
                                                std::string_view name) {
  std::string_view value;
  if (object[name].get_string().get(value) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(StrCat("missing '", name, "'"));
  }
  absl::StatusOr<std::string> bytes = Base64UrlDecode(value);
  if (!bytes.ok() || bytes->empty()) {
    return absl::InvalidArgumentError(StrCat("'", name, "' is not base64url"));
  }
  return bytes;
}

[[nodiscard]] absl::StatusOr<PkeyPtr> FromData(const char* type, OSSL_PARAM_BLD* builder) {
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(builder);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
  EVP_PKEY* key = nullptr;
  const bool ok = params != nullptr && ctx != nullptr && EVP_PKEY_fromdata_init(ctx) == 1 &&
                  EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1;
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  if (!ok) return absl::InvalidArgumentError(StrCat("not a valid ", type, " public key"));
  return Wrap(key);
}

// RSA public keys as RFC 7518 section 6.3.1 spells them. The size is the modulus's bit length
// (BN_num_bits), not the length of its encoding: leading zero bytes would otherwise let a
// 1024-bit key, padded to 256 bytes, pass for 2048 bits.
constexpr int kMinRsaModulusBits = 2048;
// OpenSSL refuses to verify with a larger modulus (OPENSSL_RSA_MAX_MODULUS_BITS); a key that
// can never verify is refused when the set is loaded, not on every token.
constexpr int kMaxRsaModulusBits = 16384;
// The exponent: e = 1 makes a "signature" equal to its padded message, so anyone can forge
// one; an even e is no RSA key at all. Identity providers publish 65537; 3 is still valid RSA
// (OpenSSL's PKCS#1 check is strict, so the e = 3 forgeries of lax verifiers do not apply).
// A huge e forges nothing, but each verification costs time linear in its bits, and no
// genuine key has one: 32 bits, as Go's crypto/rsa and most libraries allow, is the cap.
constexpr int kMaxRsaExponentBits = 32;

[[nodiscard]] absl::Status CheckRsaNumbers(const BIGNUM* n, const BIGNUM* e) {
  const int n_bits = BN_num_bits(n);
  if (n_bits < kMinRsaModulusBits) {
    return absl::InvalidArgumentError(
        StrCat("RSA keys need at least ", kMinRsaModulusBits, " bits; this modulus has ", n_bits));
  }
  if (n_bits > kMaxRsaModulusBits) {
    return absl::InvalidArgumentError(
        StrCat("RSA keys have at most ", kMaxRsaModulusBits, " bits; this modulus has ", n_bits));
  }
  if (!BN_is_odd(n)) return absl::InvalidArgumentError("the RSA modulus is even");
  if (BN_num_bits(e) > kMaxRsaExponentBits) {
    return absl::InvalidArgumentError(StrCat("the RSA exponent 'e' has ", BN_num_bits(e),
                                             " bits; at most ", kMaxRsaExponentBits,
                                             " are accepted (65537 is usual)"));
  }
  if (BN_get_word(e) < 3 || !BN_is_odd(e)) {
    return absl::InvalidArgumentError(
        StrCat("the RSA exponent 'e' is ", BN_get_word(e), "; it must be odd and at least 3"));
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<PkeyPtr> RsaKey(simdjson::dom::object& jwk) {
  absl::StatusOr<std::string> n = Field(jwk, "n");
  if (!n.ok()) return n.status();
  absl::StatusOr<std::string> e = Field(jwk, "e");
  if (!e.ok()) return e.status();
  // The largest allowed modulus is 2 KiB; far longer text is refused before BN_bin2bn, which
  // takes an int length.
  if (n->size() > 4096 || e->size() > 4096) {
    return absl::InvalidArgumentError("RSA key parameters are implausibly long");
  }
  BIGNUM* bn_n =
      BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()), int(n->size()), nullptr);
  BIGNUM* bn_e =
      BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()), int(e->size()), nullptr);
  OSSL_PARAM_BLD* builder = OSSL_PARAM_BLD_new();
  absl::StatusOr<PkeyPtr> key = absl::InvalidArgumentError("out of memory");
  if (bn_n && bn_e && builder) {
    if (absl::Status checked = CheckRsaNumbers(bn_n, bn_e); !checked.ok()) {
      key = checked;
    } else if (OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_N, bn_n) &&
               OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_E, bn_e)) {
      key = FromData("RSA", builder);
    }
  }
  OSSL_PARAM_BLD_free(builder);
  BN_free(bn_n);
  BN_free(bn_e);
  return key;
}

[[nodiscard]] absl::StatusOr<PkeyPtr> EcKey(simdjson::dom::object& jwk) {
  std::string_view crv;
  if (jwk["crv"].get_string().get(crv) != simdjson::SUCCESS || crv != "P-256") {
    return absl::InvalidArgumentError("only the P-256 curve is supported");
  }
  absl::StatusOr<std::string> x = Field(jwk, "x");
  if (!x.ok()) return x.status();
  absl::StatusOr<std::string> y = Field(jwk, "y");
  if (!y.ok()) return y.status();
  if (x->size() != 32 || y->size() != 32) {
    return absl::InvalidArgumentError("P-256 coordinates are 32 bytes");
  }
  std::string point = "\x04" + *x + *y;  // uncompressed SEC1 point
  OSSL_PARAM_BLD* builder = OSSL_PARAM_BLD_new();
  absl::StatusOr<PkeyPtr> key = absl::InvalidArgumentError("out of memory");
  if (builder &&
      OSSL_PARAM_BLD_push_utf8_string(builder, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
      OSSL_PARAM_BLD_push_octet_string(builder, OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size())) {
    key = FromData("EC", builder);
  }
  OSSL_PARAM_BLD_free(builder);
  return key;
}

[[nodiscard]] absl::StatusOr<PkeyPtr> OkpKey(simdjson::dom::object& jwk) {
  std::string_view crv;
  if (jwk["crv"].get_string().get(crv) != simdjson::SUCCESS || crv != "Ed25519") {
    return absl::InvalidArgumentError("only the Ed25519 curve is supported");
  }
  absl::StatusOr<std::string> x = Field(jwk, "x");
  if (!x.ok()) return x.status();
  if (x->size() != 32) return absl::InvalidArgumentError("Ed25519 keys are 32 bytes");
  // OpenSSL's Ed25519 verify accepts a public key of small order, for which one signature
  // (R the identity, S 0) verifies every message: such a key would let anyone forge tokens,
  // as an RSA key with e = 1 would. libsodium refuses those, and non-canonical encodings.
  if (sodium_init() < 0 ||
      crypto_core_ed25519_is_valid_point(reinterpret_cast<const unsigned char*>(x->data())) != 1) {
    return absl::InvalidArgumentError(
        "not a valid Ed25519 public key (of small order, not canonical, or off the curve): "
        "anyone could forge a signature for it");
  }
  EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(x->data()), x->size());
  if (key == nullptr) return absl::InvalidArgumentError("not a valid Ed25519 public key");
  return Wrap(key);
}

}  // namespace

std::string_view JwtAlgorithmName(JwtAlgorithm alg) {
  switch (alg) {
    case JwtAlgorithm::kRs256:
      return "RS256";
    case JwtAlgorithm::kEs256:
      return "ES256";
    case JwtAlgorithm::kEdDsa:
      return "EdDSA";
  }
  return "?";
}

std::optional<JwtAlgorithm> JwtAlgorithmNamed(std::string_view name) {
  for (JwtAlgorithm alg : {JwtAlgorithm::kRs256, JwtAlgorithm::kEs256, JwtAlgorithm::kEdDsa}) {
    if (JwtAlgorithmName(alg) == name) return alg;
  }
  return std::nullopt;
}

absl::StatusOr<std::shared_ptr<const Jwks>> Jwks::Parse(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("JWKS is not valid JSON");
  }
  simdjson::dom::array keys;
  if (root["keys"].get_array().get(keys) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("JWKS has no 'keys' array");
  }
  auto jwks = std::shared_ptr<Jwks>(new Jwks);
  size_t index = 0;
  for (simdjson::dom::element element : keys) {
    ++index;
    simdjson::dom::object jwk;
    if (element.get_object().get(jwk) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(StrCat("JWKS key #", index, " is not an object"));
    }
    std::string_view kty, use, alg, kid;
    if (jwk["kty"].get_string().get(kty) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(StrCat("JWKS key #", index, " has no 'kty'"));
    }
    if (jwk["use"].get_string().get(use) == simdjson::SUCCESS && use != "sig") continue;
    if (jwk["kid"].get_string().get(kid) != simdjson::SUCCESS) kid = {};
    const bool has_alg = jwk["alg"].get_string().get(alg) == simdjson::SUCCESS;
    absl::StatusOr<PkeyPtr> key = absl::InvalidArgumentError("");
    JwtAlgorithm algorithm;
    if (kty == "RSA") {
      algorithm = JwtAlgorithm::kRs256;
      key = RsaKey(jwk);
    } else if (kty == "EC") {
      algorithm = JwtAlgorithm::kEs256;
      key = EcKey(jwk);
    } else if (kty == "OKP") {
      algorithm = JwtAlgorithm::kEdDsa;
      key = OkpKey(jwk);
    } else {
      continue;  // "oct" and anything unknown: never a verification key here
    }
    if (has_alg && alg != JwtAlgorithmName(algorithm)) continue;  // e.g. an RSA key for PS256
    if (!key.ok()) {
      return absl::InvalidArgumentError(StrCat("JWKS key #", index, kid.empty() ? "" : " '", kid,
                                               kid.empty() ? "" : "'", ": ",
                                               key.status().message()));
    }
    // The key's public part, for what must know it is still in the set (a job's token).
    const int der_size = i2d_PUBKEY(key->get(), nullptr);
    std::string der(size_t(std::max(der_size, 0)), '\0');
    unsigned char* to = reinterpret_cast<unsigned char*>(der.data());
    if (der_size <= 0 || i2d_PUBKEY(key->get(), &to) != der_size) {
      return absl::InternalError(StrCat("JWKS key #", index, ": cannot encode its public part"));
    }
    jwks->keys_.push_back({std::string(kid), algorithm, std::move(*key), HexEncode(Sha256(der))});
  }
  if (jwks->keys_.empty()) {
    return absl::InvalidArgumentError("JWKS holds no RS256, ES256 or EdDSA signing key");
  }
  return std::shared_ptr<const Jwks>(std::move(jwks));
}

const JwksKey* Jwks::Find(std::string_view kid, JwtAlgorithm algorithm) const {
  const JwksKey* found = nullptr;
  for (const JwksKey& key : keys_) {
    if (key.algorithm != algorithm) continue;
    if (!kid.empty()) {
      if (key.kid == kid) return &key;
      continue;
    }
    if (found != nullptr) return nullptr;  // no kid and several candidates: ambiguous
    found = &key;
  }
  return found;
}

}  // namespace pillar::identity
