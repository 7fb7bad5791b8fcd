#include "testing/jwt_signer.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>

#include "common/crypto.h"

namespace pillar::testing {
namespace {

std::string Bn(const EVP_PKEY* key, const char* name) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &bn) != 1) std::abort();
  std::string out(size_t(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));
  BN_free(bn);
  return out;
}

}  // namespace

std::string Base64Url(std::string_view bytes) { return Base64UrlEncode(bytes); }

JwtSigner JwtSigner::Make(Algorithm algorithm, std::string kid) {
  JwtSigner s;
  s.algorithm_ = algorithm;
  s.kid_ = std::move(kid);
  EVP_PKEY* key = nullptr;
  switch (algorithm) {
    case kRs256:
      key = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t(2048));
      break;
    case kEs256:
      key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
      break;
    case kEdDsa:
      key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
      break;
  }
  if (key == nullptr) std::abort();
  s.key_.reset(key, EVP_PKEY_free);
  return s;
}

std::string_view JwtSigner::alg() const {
  return algorithm_ == kRs256 ? "RS256" : algorithm_ == kEs256 ? "ES256" : "EdDSA";
}

std::string JwtSigner::Jwk() const {
  std::string kid = kid_.empty() ? "" : ",\"kid\":\"" + kid_ + "\"";
  switch (algorithm_) {
    case kRs256:
      return "{\"kty\":\"RSA\",\"use\":\"sig\"" + kid + ",\"n\":\"" +
             Base64Url(Bn(key_.get(), OSSL_PKEY_PARAM_RSA_N)) + "\",\"e\":\"" +
             Base64Url(Bn(key_.get(), OSSL_PKEY_PARAM_RSA_E)) + "\"}";
    case kEs256: {
      unsigned char point[65];
      size_t len = 0;
      if (EVP_PKEY_get_octet_string_param(key_.get(), OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point,
                                          &len) != 1 ||
          len != 65) {
        std::abort();
      }
      std::string raw(reinterpret_cast<char*>(point), len);
      return "{\"kty\":\"EC\",\"crv\":\"P-256\"" + kid + ",\"x\":\"" +
             Base64Url(raw.substr(1, 32)) + "\",\"y\":\"" + Base64Url(raw.substr(33, 32)) + "\"}";
    }
    case kEdDsa: {
      unsigned char raw[32];
      size_t len = sizeof raw;
      if (EVP_PKEY_get_raw_public_key(key_.get(), raw, &len) != 1) std::abort();
      return "{\"kty\":\"OKP\",\"crv\":\"Ed25519\"" + kid + ",\"x\":\"" +
             Base64Url(std::string_view(reinterpret_cast<char*>(raw), len)) + "\"}";
    }
  }
  return "";
}

std::string JwtSigner::Sign(std::string_view claims, std::string header) const {
  if (header.empty()) {
    header = "{\"alg\":\"" + std::string(alg()) + "\",\"typ\":\"JWT\"" +
             (kid_.empty() ? "" : ",\"kid\":\"" + kid_ + "\"") + "}";
  }
  const std::string signing_input = Base64Url(header) + "." + Base64Url(claims);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const EVP_MD* md = algorithm_ == kEdDsa ? nullptr : EVP_sha256();
  size_t len = 0;
  if (EVP_DigestSignInit(ctx, nullptr, md, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx, nullptr, &len,
                     reinterpret_cast<const unsigned char*>(signing_input.data()),
                     signing_input.size()) != 1) {
    std::abort();
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(signing_input.data()),
                     signing_input.size()) != 1) {
    std::abort();
  }
  EVP_MD_CTX_free(ctx);
  sig.resize(len);
  if (algorithm_ == kEs256) {  // DER to the JWS's r||s
    const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* ecdsa = d2i_ECDSA_SIG(nullptr, &p, long(sig.size()));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(ecdsa), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(ecdsa), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(ecdsa);
    sig = raw;
  }
  return signing_input + "." + Base64Url(sig);
}

std::string JwtSigner::PublicPem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key_.get());
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  std::string pem(data, size_t(len));
  BIO_free(bio);
  return pem;
}

std::string JwksJson(const std::vector<const JwtSigner*>& signers) {
  std::string out = "{\"keys\":[";
  for (size_t i = 0; i < signers.size(); ++i) out += (i ? "," : "") + signers[i]->Jwk();
  return out + "]}";
}

std::string SignHs256(std::string_view header, std::string_view claims, std::string_view secret) {
  const std::string input = Base64Url(header) + "." + Base64Url(claims);
  unsigned char mac[32];
  size_t len = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, sizeof mac,
                &len) == nullptr) {
    std::abort();
  }
  return input + "." + Base64Url(std::string_view(reinterpret_cast<char*>(mac), len));
}

}  // namespace pillar::testing
