#include "identity/jwt_verifier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "testing/jwt_signer.h"
#include "testing/temp_dir.h"

namespace pillar::identity {
namespace {

using testing::JwtSigner;

constexpr int64_t kNow = 1'800'000'000;  // seconds

class JwtVerifierTest : public ::testing::Test {
 protected:
  JwtVerifierTest()
      : rsa_(JwtSigner::Make(JwtSigner::kRs256, "rsa-1")),
        ec_(JwtSigner::Make(JwtSigner::kEs256, "ec-1")),
        ed_(JwtSigner::Make(JwtSigner::kEdDsa, "ed-1")),
        stranger_(JwtSigner::Make(JwtSigner::kRs256, "rsa-1")) {
    options_.issuer = "https://idp.example";
    options_.audiences = {"pillar"};
    options_.tenant_claim = "org";
    options_.attribute_claims = {{"clearances", "clr"}};
    jwks_ = *Jwks::Parse(testing::JwksJson({&rsa_, &ec_, &ed_}));
  }

  std::string Claims(int64_t exp = kNow + 300, std::string extra = "") const {
    return StrCat(R"({"iss":"https://idp.example","aud":["other","pillar"],"sub":"alice",)",
                  R"("org":"acme","roles":"user auditor","clr":["public","internal"],"exp":)", exp,
                  extra, "}");
  }

  absl::StatusOr<std::shared_ptr<const Principal>> Verify(const std::string& token,
                                                          int64_t now = kNow) const {
    JwtVerifier verifier(options_, jwks_);
    return verifier.Verify(token, now * 1'000'000);
  }

  std::string Refusal(const std::string& token, int64_t now = kNow) const {
    auto who = Verify(token, now);
    EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << token;
    return std::string(who.status().message());
  }

  JwtSigner rsa_, ec_, ed_, stranger_;
  JwtOptions options_;
  std::shared_ptr<const Jwks> jwks_;
};

TEST_F(JwtVerifierTest, EachAlgorithmVerifiesAndMapsClaimsToThePrincipal) {
  for (const JwtSigner* signer : {&rsa_, &ec_, &ed_}) {
    auto who = Verify(signer->Sign(Claims()));
    ASSERT_TRUE(who.ok()) << signer->alg() << ": " << who.status();
    EXPECT_EQ((*who)->id, "jwt:alice");
    EXPECT_EQ((*who)->method, AuthMethod::kJwt);
    EXPECT_EQ((*who)->tenant, "acme");
    EXPECT_EQ((*who)->roles, (std::vector<std::string>{"user", "auditor"}));
    EXPECT_EQ((*who)->attributes.at("clearances"),
              (std::vector<std::string>{"public", "internal"}));
  }
}

TEST_F(JwtVerifierTest, TimeClaimsHonourTheClockSkew) {
  options_.clock_skew = absl::Seconds(30);
  const std::string token = rsa_.Sign(Claims(kNow + 10, ",\"nbf\":" + std::to_string(kNow)));
  EXPECT_TRUE(Verify(token, kNow + 39).ok());
  EXPECT_EQ(Refusal(token, kNow + 40), "invalid token: expired");
  EXPECT_TRUE(Verify(token, kNow - 30).ok());
  EXPECT_EQ(Refusal(token, kNow - 31), "invalid token: not yet valid");
}

TEST_F(JwtVerifierTest, RefusesEveryKnownAttack) {
  const std::string good = rsa_.Sign(Claims());
  const std::string claims = Claims();
  // Expired and not yet valid.
  EXPECT_EQ(Refusal(rsa_.Sign(Claims(kNow - 3600))), "invalid token: expired");
  EXPECT_EQ(Refusal(rsa_.Sign(Claims(kNow + 7200, ",\"nbf\":" + std::to_string(kNow + 3600)))),
            "invalid token: not yet valid");
  // Wrong audience, wrong issuer, no exp.
  EXPECT_EQ(Refusal(rsa_.Sign(R"({"iss":"https://idp.example","aud":"other","sub":"a","exp":)" +
                              std::to_string(kNow + 60) + "}")),
            "invalid token: wrong audience");
  EXPECT_EQ(Refusal(rsa_.Sign(R"({"iss":"https://evil","aud":"pillar","sub":"a","exp":)" +
                              std::to_string(kNow + 60) + "}")),
            "invalid token: wrong issuer");
  EXPECT_EQ(Refusal(rsa_.Sign(R"({"iss":"https://idp.example","aud":"pillar","sub":"a"})")),
            "invalid token: no exp claim");
  // Signed by a key that is not in the JWKS (same kid, different key).
  EXPECT_EQ(Refusal(stranger_.Sign(claims)), "invalid token: signature does not verify");
  // alg "none", with and without a signature.
  const std::string none_header = R"({"alg":"none","typ":"JWT"})";
  const std::string unsigned_token =
      testing::Base64Url(none_header) + "." + testing::Base64Url(claims) + ".";
  EXPECT_EQ(Refusal(unsigned_token), "invalid token: algorithm 'none' is not accepted");
  // Algorithm confusion: HS256 keyed with the RSA public key.
  EXPECT_EQ(
      Refusal(testing::SignHs256(R"({"alg":"HS256","kid":"rsa-1"})", claims, rsa_.PublicPem())),
      "invalid token: algorithm 'HS256' is not accepted");
  // An RS256 header over an ES256 key's signature: the kid names a key of another type.
  EXPECT_EQ(Refusal(ec_.Sign(claims, R"({"alg":"RS256","kid":"ec-1"})")),
            "invalid token: no RS256 key 'ec-1' in the JWKS");
  // A kid no key set would write is anyone's text, the token not verified yet: not quoted, nor
  // any part of it (review helper-136: cut at 64 bytes, an email and a key's start reached the
  // audit log).
  EXPECT_EQ(Refusal(ec_.Sign(claims, R"({"alg":"ES256","kid":"jo.smith@example.org secret"})")),
            "invalid token: no ES256 key for the token's kid in the JWKS");
  EXPECT_EQ(Refusal(ec_.Sign(claims, R"({"alg":"ES256","kid":")" + std::string(65, 'k') + R"("})")),
            "invalid token: no ES256 key for the token's kid in the JWKS");
  EXPECT_EQ(Refusal(ec_.Sign(claims, R"({"alg":"ES256","kid":"4111+1111+1111+1111"})")),
            "invalid token: no ES256 key for the token's kid in the JWKS");
  // The same of an alg (review helper-137: cut at 16 bytes, 13 digits of a card stayed).
  EXPECT_EQ(Refusal(ec_.Sign(claims, R"({"alg":"4111 1111 1111 1111","kid":"ec-1"})")),
            "invalid token: the token's algorithm is not accepted");
  // Tampered claims with the original signature.
  const size_t dot1 = good.find('.'), dot2 = good.rfind('.');
  const std::string tampered =
      good.substr(0, dot1 + 1) + testing::Base64Url(Claims(kNow + 999999)) + good.substr(dot2);
  EXPECT_EQ(Refusal(tampered), "invalid token: signature does not verify");
  // Truncated: a part missing, or the signature cut short.
  EXPECT_EQ(Refusal(good.substr(0, dot2)),
            "invalid token: not a compact JWS (three dot-separated parts)");
  EXPECT_EQ(Refusal(good.substr(0, good.size() - 10)), "invalid token: signature does not verify");
  // Times no clock reaches, which would overflow microseconds.
  EXPECT_EQ(
      Refusal(rsa_.Sign(R"({"iss":"https://idp.example","aud":"pillar","sub":"a","exp":1e300})")),
      "invalid token: exp or nbf out of range");
  // Oversized.
  EXPECT_EQ(Refusal(rsa_.Sign(Claims(kNow + 300, ",\"pad\":\"" + std::string(9000, 'x') + "\""))),
            "invalid token: too large");
  // Garbage in each part.
  EXPECT_EQ(Refusal(testing::Base64Url("nope") + ".e30.c2ln"),
            "invalid token: header is not a JSON object");
  EXPECT_EQ(Refusal("!!.??.##"), "invalid token: bad base64url");
  // A critical header extension nobody here understands.
  EXPECT_EQ(Refusal(rsa_.Sign(claims, R"({"alg":"RS256","kid":"rsa-1","crit":["x"]})")),
            "invalid token: unsupported 'crit' header");
}

TEST_F(JwtVerifierTest, TheJwksFileIsReloadedWhenItChanges) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "jwks.json").string();
  std::ofstream(path) << testing::JwksJson({&rsa_});
  options_.jwks_path = path;
  options_.reload_interval = absl::Milliseconds(10);
  auto verifier = JwtVerifier::Create(options_);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const std::string ed_token = ed_.Sign(Claims());
  EXPECT_FALSE((*verifier)->Verify(ed_token, kNow * 1'000'000).ok());
  // A broken file is refused and the old keys stay.
  std::ofstream(path) << "{not json";
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE((*verifier)->Verify(rsa_.Sign(Claims()), kNow * 1'000'000).ok());
  std::ofstream(path) << testing::JwksJson({&rsa_, &ed_});
  bool accepted = false;
  for (int i = 0; i < 300 && !accepted; ++i) {
    accepted = (*verifier)->Verify(ed_token, kNow * 1'000'000).ok();
    if (!accepted) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(accepted);
  // The IdP retires the RSA key: a token verified (and cached) before is refused now.
  const std::string rsa_token = rsa_.Sign(Claims());
  EXPECT_TRUE((*verifier)->Verify(rsa_token, kNow * 1'000'000).ok());
  EXPECT_TRUE((*verifier)->Verify(rsa_token, kNow * 1'000'000).ok());  // from the cache
  std::ofstream(path) << testing::JwksJson({&ed_});
  bool refused = false;
  for (int i = 0; i < 300 && !refused; ++i) {
    refused = !(*verifier)->Verify(rsa_token, kNow * 1'000'000).ok();
    if (!refused) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(refused);
}

// The key set says whose tokens make principals: a file others may write is refused at start
// and on reload, and the keys read before stay.
TEST_F(JwtVerifierTest, AJwksFileOthersMayWriteIsRefused) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "jwks.json").string();
  std::ofstream(path) << testing::JwksJson({&rsa_});
  options_.jwks_path = path;
  options_.reload_interval = absl::Milliseconds(10);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  EXPECT_EQ(JwtVerifier::Create(options_).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto verifier = JwtVerifier::Create(options_);
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  std::ofstream(path) << testing::JwksJson({&rsa_, &ed_});
  ASSERT_EQ(::chmod(path.c_str(), 0664), 0);
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_FALSE((*verifier)->Verify(ed_.Sign(Claims()), kNow * 1'000'000).ok());
  EXPECT_TRUE((*verifier)->Verify(rsa_.Sign(Claims()), kNow * 1'000'000).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);  // put right: taken
  bool accepted = false;
  for (int i = 0; i < 300 && !accepted; ++i) {
    accepted = (*verifier)->Verify(ed_.Sign(Claims()), kNow * 1'000'000).ok();
    if (!accepted) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(accepted);
}

TEST_F(JwtVerifierTest, ACachedTokenStillExpires) {
  JwtVerifier verifier(options_, jwks_);
  const std::string token = ec_.Sign(Claims(kNow + 10, ",\"nbf\":" + std::to_string(kNow)));
  EXPECT_EQ(verifier.Verify(token, (kNow - 120) * 1'000'000).status().message(),
            "invalid token: not yet valid");
  EXPECT_TRUE(verifier.Verify(token, kNow * 1'000'000).ok());
  EXPECT_EQ(verifier.Verify(token, (kNow - 120) * 1'000'000).status().message(),
            "invalid token: not yet valid");  // cached, and still checked
  EXPECT_EQ(verifier.Verify(token, (kNow + 70) * 1'000'000).status().message(),
            "invalid token: expired");
}

TEST(JwksTest, RefusesKeySetsWithoutUsableKeysAndSkipsForeignOnes) {
  EXPECT_FALSE(Jwks::Parse("[]").ok());
  EXPECT_FALSE(Jwks::Parse(R"({"keys":[]})").ok());
  EXPECT_FALSE(Jwks::Parse(R"({"keys":[{"kty":"oct","k":"c2VjcmV0"}]})").ok());
  EXPECT_FALSE(Jwks::Parse(R"({"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]})").ok());  // tiny
  JwtSigner ed = JwtSigner::Make(JwtSigner::kEdDsa, "");
  auto jwks = Jwks::Parse(R"({"keys":[{"kty":"oct","k":"c2VjcmV0"},)" + ed.Jwk() + "]}");
  ASSERT_TRUE(jwks.ok()) << jwks.status();
  EXPECT_EQ((*jwks)->keys().size(), 1u);
  EXPECT_NE((*jwks)->Find("", JwtAlgorithm::kEdDsa), nullptr);
  EXPECT_EQ((*jwks)->Find("", JwtAlgorithm::kRs256), nullptr);
}

}  // namespace
}  // namespace pillar::identity
