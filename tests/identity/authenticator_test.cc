#include "identity/authenticator.h"

#include <gtest/gtest.h>

#include "common/strings.h"
#include "identity/api_key.h"
#include "identity/principal_codec.h"
#include "testing/jwt_signer.h"
#include "testing/temp_dir.h"

namespace pillar::identity {
namespace {

constexpr int64_t kNowS = 1'800'000'000;

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*state::OpenSqliteStateStore((dir_.path() / "s.db").string()));
    key_ = GenerateApiKey();
    state::ApiKeyRecord r;
    r.id = key_.id;
    r.name = "k";
    r.secret_hash = key_.secret_hash;
    r.roles = {"user"};
    ASSERT_TRUE(store_->PutKey(r).ok());
    keys_ = std::make_unique<ApiKeyTable>(*store_, ApiKeyTableOptions{absl::ZeroDuration()});
    ASSERT_TRUE(keys_->Refresh().ok());
    JwtOptions options;
    options.issuer = "idp";
    options.audiences = {"pillar"};
    jwt_ = std::make_unique<JwtVerifier>(options, *Jwks::Parse(testing::JwksJson({&signer_})));
    clients_["spiffe://acme/svc/batch"] = {"acme", {"user"}, {{"team", {"batch"}}}, {}};
  }

  testing::TempDir dir_;
  std::unique_ptr<state::StateStore> store_;
  NewApiKey key_;
  std::unique_ptr<ApiKeyTable> keys_;
  testing::JwtSigner signer_ = testing::JwtSigner::Make(testing::JwtSigner::kEdDsa, "e");
  std::unique_ptr<JwtVerifier> jwt_;
  std::map<std::string, CertificateClient> clients_;
};

TEST_F(AuthenticatorTest, EveryMethodYieldsOnePrincipalShape) {
  Authenticator auth(keys_.get(), jwt_.get(), clients_);
  const int64_t now = kNowS * 1'000'000;
  auto key = auth.Authenticate("Bearer " + key_.text, "", "data", now);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ((*key)->method, AuthMethod::kApiKey);
  const std::string token = signer_.Sign(StrCat(
      R"({"iss":"idp","aud":"pillar","sub":"bob","roles":["admin"],"exp":)", kNowS + 60, "}"));
  auto jwt = auth.Authenticate("bearer " + token, "", "data", now);
  ASSERT_TRUE(jwt.ok()) << jwt.status();
  EXPECT_EQ((*jwt)->id, "jwt:bob");
  EXPECT_EQ((*jwt)->roles, std::vector<std::string>{"admin"});
  auto cert = auth.Authenticate("", "spiffe://acme/svc/batch", "data", now);
  ASSERT_TRUE(cert.ok()) << cert.status();
  EXPECT_EQ((*cert)->id, "mtls:spiffe://acme/svc/batch");
  EXPECT_EQ((*cert)->method, AuthMethod::kMtls);
  EXPECT_EQ((*cert)->tenant, "acme");
  EXPECT_EQ((*cert)->attributes.at("team"), std::vector<std::string>{"batch"});
}

// Found by review helper-59: a name was a name whichever listener's CA vouched for it, so a
// certificate from the CA a data listener trusts for tenants could name the admins' client.
TEST_F(AuthenticatorTest, ACertificateNamesAClientOnlyOnItsListeners) {
  clients_["ops-admin"] = {"", {"admin"}, {}, {"admin"}};
  Authenticator auth(keys_.get(), jwt_.get(), clients_);
  const int64_t now = kNowS * 1'000'000;
  auto on_admin = auth.Authenticate("", "ops-admin", "admin", now);
  ASSERT_TRUE(on_admin.ok()) << on_admin.status();
  EXPECT_EQ((*on_admin)->id, "mtls:ops-admin");
  auto on_data = auth.Authenticate("", "ops-admin", "data", now);
  EXPECT_EQ(on_data.status().code(), absl::StatusCode::kUnauthenticated);
  // A client without listeners is one on any listener that asks for certificates.
  EXPECT_TRUE(auth.Authenticate("", "spiffe://acme/svc/batch", "admin", now).ok());
}

TEST_F(AuthenticatorTest, ABadCredentialNeverFallsBackToTheCertificate) {
  Authenticator auth(keys_.get(), jwt_.get(), clients_);
  const int64_t now = kNowS * 1'000'000;
  // A verified certificate does not rescue a wrong key sent alongside it.
  auto who = auth.Authenticate("Bearer pk_000000000000_" + std::string(43, 'A'),
                               "spiffe://acme/svc/batch", "data", now);
  EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authenticate("", "spiffe://other", "data", now).status().message(),
            "client certificate 'spiffe://other' is not a known client on listener 'data'");
  EXPECT_EQ(auth.Authenticate("", "", "data", now).status().message(),
            "missing Authorization header");
  // Without a JWT verifier, a token is just a malformed key.
  Authenticator keys_only(keys_.get(), nullptr, {});
  EXPECT_EQ(keys_only.Authenticate("Bearer a.b.c", "", "data", now).status().message(),
            "malformed API key");
}

// What an asynchronous job carries over a restart: every method's principal survives its
// encoding, and is checked again when the job runs.
TEST_F(AuthenticatorTest, AStoredPrincipalIsCheckedAgainWhenItsWorkRuns) {
  Authenticator auth(keys_.get(), jwt_.get(), clients_);
  // Stands for the listener's check (http::HttpServer::VerifyClientCertificate, tested with
  // real certificates in the jobs integration test): "good" verifies, anything else does not.
  auth.SetCertificateCheck(
      [](std::string_view listener, std::string_view der) -> absl::StatusOr<std::string> {
        if (listener == "data" && der == "good") return std::string("spiffe://acme/svc/batch");
        if (der == "other") return std::string("spiffe://acme/svc/other");
        return absl::UnauthenticatedError("the client certificate no longer verifies: revoked");
      });
  const int64_t now = kNowS * 1'000'000;
  const std::string token = signer_.Sign(StrCat(
      R"({"iss":"idp","aud":"pillar","sub":"bob","roles":["admin"],"exp":)", kNowS + 60, "}"));
  auto with_certificate = [](const Principal& p, std::string der) {
    Principal out = p;
    out.certificate = std::move(der);
    out.listener = "data";
    return out;
  };
  for (auto who : {auth.Authenticate("Bearer " + key_.text, "", "data", now),
                   auth.Authenticate("bearer " + token, "", "data", now),
                   auth.Authenticate("", "spiffe://acme/svc/batch", "data", now)}) {
    ASSERT_TRUE(who.ok()) << who.status();
    const Principal stored =
        (*who)->method == AuthMethod::kMtls ? with_certificate(**who, "good") : **who;
    absl::StatusOr<Principal> decoded = DecodePrincipal(EncodePrincipal(stored));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(EncodePrincipal(*decoded), EncodePrincipal(stored));
    EXPECT_EQ(decoded->id, (*who)->id);
    EXPECT_EQ(decoded->method, (*who)->method);
    EXPECT_EQ(decoded->attributes, (*who)->attributes);
    auto again = auth.Reauthenticate(*decoded, now);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)->id, (*who)->id);
  }
  // A token past its expiry, a certificate no longer configured, a revoked key: refused.
  Principal bob =
      *DecodePrincipal(EncodePrincipal(**auth.Authenticate("bearer " + token, "", "data", now)));
  EXPECT_EQ(auth.Reauthenticate(bob, now + 61'000'000).status().code(),
            absl::StatusCode::kUnauthenticated);
  Authenticator without_tokens(keys_.get(), nullptr, clients_);
  EXPECT_EQ(without_tokens.Reauthenticate(bob, now).status().code(),
            absl::StatusCode::kUnauthenticated);  // a stored token, tokens no longer configured
  Principal cert =
      with_certificate(**auth.Authenticate("", "spiffe://acme/svc/batch", "data", now), "good");
  Authenticator without_clients(keys_.get(), jwt_.get(), {});
  EXPECT_EQ(without_clients.Reauthenticate(cert, now).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Found by review helper-67: a listed client's certificate was enough, revoked or not. It
  // must still verify on its listener, naming the same client; one stored without it (before
  // it was kept), or with no way to check it, is refused.
  EXPECT_EQ(auth.Reauthenticate(with_certificate(cert, "revoked"), now).status().message(),
            "the client certificate no longer verifies: revoked");
  EXPECT_EQ(auth.Reauthenticate(with_certificate(cert, "other"), now).status().message(),
            "the client certificate names another client now");
  Principal unkept = cert;
  unkept.certificate.clear();
  EXPECT_EQ(auth.Reauthenticate(unkept, now).status().code(), absl::StatusCode::kUnauthenticated);
  Authenticator unchecked(keys_.get(), jwt_.get(), clients_);
  EXPECT_EQ(unchecked.Reauthenticate(cert, now).status().code(),
            absl::StatusCode::kUnauthenticated);
  // A token whose signing key left the JWKS (rotated away after a leak): refused.
  testing::JwtSigner rotated = testing::JwtSigner::Make(testing::JwtSigner::kEdDsa, "e");
  JwtOptions options;
  options.issuer = "idp";
  options.audiences = {"pillar"};
  JwtVerifier rotated_verifier(options, *Jwks::Parse(testing::JwksJson({&rotated})));
  Authenticator after_rotation(keys_.get(), &rotated_verifier, clients_);
  const std::string not_now =
      "the token that submitted this job would not be accepted now: its issuer or audience is no "
      "longer trusted, or the JWKS no longer gives its key for its kid";
  EXPECT_EQ(after_rotation.Reauthenticate(bob, now).status().message(), not_now);
  // The same key republished under another kid: the token's header names a kid the set no
  // longer has, so the token would be refused, and so is its job (found by review helper-69).
  std::string renamed = signer_.Jwk();
  const size_t kid_at = renamed.find("\"kid\":\"e\"");
  ASSERT_NE(kid_at, std::string::npos) << renamed;
  renamed.replace(kid_at, 9, "\"kid\":\"e2\"");
  JwtVerifier renamed_verifier(options, *Jwks::Parse("{\"keys\":[" + renamed + "]}"));
  EXPECT_FALSE(renamed_verifier.Verify(token, now).ok());
  Authenticator after_rename(keys_.get(), &renamed_verifier, clients_);
  EXPECT_EQ(after_rename.Reauthenticate(bob, now).status().message(), not_now);
  // Another issuer trusted since (a restart with a new [jwt] issuer): refused too.
  JwtOptions other_issuer = options;
  other_issuer.issuer = "other-idp";
  JwtVerifier other_verifier(other_issuer, *Jwks::Parse(testing::JwksJson({&signer_})));
  Authenticator after_issuer(keys_.get(), &other_verifier, clients_);
  EXPECT_EQ(after_issuer.Reauthenticate(bob, now).status().message(), not_now);
  // No audience of the token accepted any more (found by review helper-70): refused.
  JwtOptions other_audience = options;
  other_audience.audiences = {"other-service"};
  JwtVerifier audience_verifier(other_audience, *Jwks::Parse(testing::JwksJson({&signer_})));
  EXPECT_EQ(Authenticator(keys_.get(), &audience_verifier, clients_)
                .Reauthenticate(bob, now)
                .status()
                .message(),
            not_now);
  // The same issuer and key: accepted.
  JwtVerifier same_verifier(options, *Jwks::Parse(testing::JwksJson({&signer_})));
  EXPECT_TRUE(Authenticator(keys_.get(), &same_verifier, clients_).Reauthenticate(bob, now).ok());
  Principal unsigned_bob = bob;
  unsigned_bob.signing_key.clear();
  EXPECT_EQ(auth.Reauthenticate(unsigned_bob, now).status().code(),
            absl::StatusCode::kUnauthenticated);
  Principal key = **auth.Authenticate("Bearer " + key_.text, "", "data", now);
  ASSERT_TRUE(store_->RevokeKey(key_.id, now).ok());
  ASSERT_TRUE(keys_->Refresh().ok());
  EXPECT_EQ(auth.Reauthenticate(key, now).status().message(), "API key revoked");
}

TEST(PrincipalCodecTest, RefusesWhatItDidNotWrite) {
  for (const char* bad : {"", "[]", "{}",
                          R"({"method":"x","id":"a","tenant":"","key_id":"",)"
                          R"("expires_us":0,"roles":[],"attributes":{}})",
                          R"({"method":"jwt","id":"","tenant":"","key_id":"","expires_us":0,)"
                          R"("roles":[],"attributes":{}})",
                          R"({"method":"jwt","id":"a","tenant":"","key_id":"","expires_us":0,)"
                          R"("roles":[1],"attributes":{}})"}) {
    EXPECT_EQ(DecodePrincipal(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  // A certificate that is not base64, or comes without its listener.
  for (const char* bad : {R"({"method":"mtls","id":"mtls:a","tenant":"","key_id":"",)"
                          R"("expires_us":0,"roles":[],"attributes":{},"certificate":"%%",)"
                          R"("listener":"data"})",
                          R"({"method":"mtls","id":"mtls:a","tenant":"","key_id":"",)"
                          R"("expires_us":0,"roles":[],"attributes":{},"certificate":"AAAA"})"}) {
    EXPECT_EQ(DecodePrincipal(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
}

}  // namespace
}  // namespace pillar::identity
