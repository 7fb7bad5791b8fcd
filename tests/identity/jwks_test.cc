#include "identity/jwks.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <memory>
#include <string>

#include "common/crypto.h"
#include "common/strings.h"

namespace pillar::identity {
namespace {

// The big-endian bytes of a freshly generated RSA key's modulus, `bits` long.
std::string RsaModulus(size_t bits) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", bits), EVP_PKEY_free);
  EXPECT_NE(key, nullptr);
  BIGNUM* n = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(key.get(), OSSL_PKEY_PARAM_RSA_N, &n), 1);
  std::string bytes(size_t(BN_num_bytes(n)), '\0');
  BN_bn2bin(n, reinterpret_cast<unsigned char*>(bytes.data()));
  BN_free(n);
  return bytes;
}

std::string RsaJwks(std::string_view n, std::string_view e) {
  return StrCat(R"({"keys":[{"kty":"RSA","use":"sig","kid":"k","n":")", Base64UrlEncode(n),
                R"(","e":")", Base64UrlEncode(e), R"("}]})");
}

std::string Refusal(const std::string& jwks) {
  absl::StatusOr<std::shared_ptr<const Jwks>> parsed = Jwks::Parse(jwks);
  EXPECT_FALSE(parsed.ok());
  return std::string(parsed.status().message());
}

const std::string kE65537("\x01\x00\x01", 3);

class JwksRsaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { modulus_2048_ = new std::string(RsaModulus(2048)); }
  static void TearDownTestSuite() { delete modulus_2048_; }
  static std::string* modulus_2048_;
};
std::string* JwksRsaTest::modulus_2048_ = nullptr;

TEST_F(JwksRsaTest, AcceptsA2048BitKeyAndToleratesALeadingZero) {
  EXPECT_TRUE(Jwks::Parse(RsaJwks(*modulus_2048_, kE65537)).ok());
  // Some libraries emit 257 bytes for a 2048-bit modulus (RFC 7518 section 6.3.1.1).
  auto padded = Jwks::Parse(RsaJwks(std::string(1, '\0') + *modulus_2048_, kE65537));
  EXPECT_TRUE(padded.ok()) << padded.status();
  EXPECT_TRUE(Jwks::Parse(RsaJwks(*modulus_2048_, "\x03")).ok());
}

TEST_F(JwksRsaTest, ASmallModulusPaddedWithZerosIsRefused) {
  const std::string small = RsaModulus(1024);
  ASSERT_EQ(small.size(), 128u);
  // 256 bytes of encoding, 1024 bits of key.
  EXPECT_EQ(Refusal(RsaJwks(std::string(128, '\0') + small, kE65537)),
            "JWKS key #1 'k': RSA keys need at least 2048 bits; this modulus has 1024");
  EXPECT_EQ(Refusal(RsaJwks(std::string(2000, '\0') + small, kE65537)),
            "JWKS key #1 'k': RSA keys need at least 2048 bits; this modulus has 1024");
}

TEST_F(JwksRsaTest, BadExponentsAreRefused) {
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, "\x01")),
            "JWKS key #1 'k': the RSA exponent 'e' is 1; it must be odd and at least 3");
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, std::string("\x00\x01", 2))),
            "JWKS key #1 'k': the RSA exponent 'e' is 1; it must be odd and at least 3");
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, std::string("\x00", 1))),
            "JWKS key #1 'k': the RSA exponent 'e' is 0; it must be odd and at least 3");
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, "\x02")),
            "JWKS key #1 'k': the RSA exponent 'e' is 2; it must be odd and at least 3");
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, std::string("\x01\x00\x00", 3))),
            "JWKS key #1 'k': the RSA exponent 'e' is 65536; it must be odd and at least 3");
  // 2^32 + 1: odd, but 33 bits.
  EXPECT_EQ(Refusal(RsaJwks(*modulus_2048_, std::string("\x01\x00\x00\x00\x01", 5))),
            "JWKS key #1 'k': the RSA exponent 'e' has 33 bits; at most 32 are accepted (65537 "
            "is usual)");
  // A huge odd exponent as long as the modulus.
  std::string huge = *modulus_2048_;
  EXPECT_NE(Refusal(RsaJwks(*modulus_2048_, huge)).find("has 2048 bits"), std::string::npos);
}

TEST_F(JwksRsaTest, AnEvenOrOversizedModulusIsRefused) {
  std::string even = *modulus_2048_;
  even.back() = char(even.back() & 0xfe);
  EXPECT_EQ(Refusal(RsaJwks(even, kE65537)), "JWKS key #1 'k': the RSA modulus is even");
  std::string oversized(2049, '\xff');  // 16392 bits, odd
  EXPECT_EQ(Refusal(RsaJwks(oversized, kE65537)),
            "JWKS key #1 'k': RSA keys have at most 16384 bits; this modulus has 16392");
}

std::string OkpJwks(std::string_view x) {
  return StrCat(R"({"keys":[{"kty":"OKP","crv":"Ed25519","kid":"e","x":")", Base64UrlEncode(x),
                R"("}]})");
}

// The fourth review's finding: OpenSSL verifies against an Ed25519 key of small order, and for
// such a key one signature (R the identity, S 0) verifies every message, so a JWKS holding one
// let anyone forge tokens with any claims.
TEST(JwksOkpTest, KeysOfSmallOrderOrNonCanonicalAreRefused) {
  std::string identity(32, '\0');  // y = 1: the identity point, order 1
  identity[0] = 1;
  const std::string zero(32, '\0');       // y = 0: order 4
  std::string non_canonical(32, '\xff');  // y = 2^255 - 1 > p, not a canonical encoding
  non_canonical[31] = '\x7f';
  for (const std::string& x : {identity, zero, non_canonical}) {
    const std::string refusal = Refusal(OkpJwks(x));
    EXPECT_NE(refusal.find("JWKS key #1 'e': not a valid Ed25519 public key"), std::string::npos)
        << refusal;
  }
  // A real key is accepted.
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free);
  ASSERT_NE(key, nullptr);
  std::string raw(32, '\0');
  size_t size = raw.size();
  ASSERT_EQ(
      EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(raw.data()), &size),
      1);
  absl::StatusOr<std::shared_ptr<const Jwks>> parsed = Jwks::Parse(OkpJwks(raw));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
}

}  // namespace
}  // namespace pillar::identity
