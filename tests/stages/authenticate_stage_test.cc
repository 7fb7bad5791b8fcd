// The authenticate stage decides expiry by its injected clock: a key or token that expires is
// refused the moment the clock passes its end, with no test sleeping for it.
#include "stages/authenticate_stage.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/strings.h"
#include "identity/api_key.h"
#include "identity/authenticator.h"
#include "state/state_store.h"
#include "testing/fake_clock.h"
#include "testing/jwt_signer.h"
#include "testing/temp_dir.h"

namespace pillar::stages {
namespace {

class CountingSink final : public audit::AuditSink {
 public:
  bool Record(const audit::Event& event) override {
    ++events;
    last_time_us = event.time_us;
    return true;
  }
  int events = 0;
  int64_t last_time_us = 0;
};

class AuthenticateStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*state::OpenSqliteStateStore((dir_.path() / "s.db").string()));
    // Expires 30 s after the fake clock's start.
    key_ = PutKey("k", clock_.UnixMicros() + 30'000'000);
    keys_ = std::make_unique<identity::ApiKeyTable>(
        *store_, identity::ApiKeyTableOptions{absl::ZeroDuration()});
    ASSERT_TRUE(keys_->Refresh().ok());
    identity::JwtOptions options;
    options.issuer = "idp";
    options.audiences = {"pillar"};
    jwt_ = std::make_unique<identity::JwtVerifier>(
        options, *identity::Jwks::Parse(testing::JwksJson({&signer_})));
    authenticator_ = std::make_unique<identity::Authenticator>(keys_.get(), jwt_.get(), clients_);
  }

  // A new key of role user in the store, expiring at `expires_us` (for the table's next Refresh).
  identity::NewApiKey PutKey(const std::string& name, int64_t expires_us) {
    identity::NewApiKey key = identity::GenerateApiKey();
    state::ApiKeyRecord r;
    r.id = key.id;
    r.name = name;
    r.secret_hash = key.secret_hash;
    r.roles = {"user"};
    r.expires_us = expires_us;
    EXPECT_TRUE(store_->PutKey(r).ok());
    return key;
  }

  pipeline::StageResult Run(const std::string& authorization, int* status) {
    pipeline::Exchange ex;
    ex.authorization = authorization;
    AuthenticateStage stage(*authenticator_, sink_, clock_);
    const pipeline::StageResult result = stage.OnRequest(ex);
    *status = ex.response.status;
    return result;
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
  CountingSink sink_;
  std::unique_ptr<state::StateStore> store_;
  identity::NewApiKey key_;
  std::unique_ptr<identity::ApiKeyTable> keys_;
  testing::JwtSigner signer_ = testing::JwtSigner::Make(testing::JwtSigner::kEdDsa, "e");
  std::unique_ptr<identity::JwtVerifier> jwt_;
  std::map<std::string, identity::CertificateClient> clients_;
  std::unique_ptr<identity::Authenticator> authenticator_;
};

TEST_F(AuthenticateStageTest, AKeyIsRefusedOnceTheClockPassesItsExpiry) {
  int status = 0;
  EXPECT_EQ(Run("Bearer " + key_.text, &status), pipeline::StageResult::kContinue);
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(Run("Bearer " + key_.text, &status), pipeline::StageResult::kContinue);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Run("Bearer " + key_.text, &status), pipeline::StageResult::kStop);
  EXPECT_EQ(status, 401);
  // The refusal was audited at the clock's time.
  EXPECT_EQ(sink_.events, 1);
  EXPECT_EQ(sink_.last_time_us, clock_.UnixMicros());
}

TEST_F(AuthenticateStageTest, ATokenIsRefusedOnceTheClockPassesItsExpiryAndTheSkew) {
  const int64_t now_s = clock_.UnixMicros() / 1'000'000;
  const std::string token =
      "Bearer " +
      signer_.Sign(StrCat(R"({"iss":"idp","aud":"pillar","sub":"bob","exp":)", now_s + 60, "}"));
  int status = 0;
  EXPECT_EQ(Run(token, &status), pipeline::StageResult::kContinue);
  clock_.Advance(absl::Seconds(60 + 59));  // within the 60 s skew
  EXPECT_EQ(Run(token, &status), pipeline::StageResult::kContinue);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Run(token, &status), pipeline::StageResult::kStop);
  EXPECT_EQ(status, 401);
}

// A request with a body comes with the caller found when its header arrived
// (app/request_handler.h): taken as it is for 100 ms, the while its key table could be behind
// anyway; a body slower than that has its credentials checked again, so a key revoked meanwhile
// does not run; and an expiry passed meanwhile is honoured whatever the time.
TEST_F(AuthenticateStageTest, TheCallerFoundAtTheHeaderStandsOnlyBriefly) {
  const std::string authorization = "Bearer " + key_.text;
  const int64_t checked_us = clock_.UnixMicros();
  const int64_t checked_ns = clock_.MonotonicNanos();
  auto found = authenticator_->Authenticate(authorization, "", "data", checked_us);
  ASSERT_TRUE(found.ok()) << found.status();
  auto run = [&](absl::Duration after_check, int* status,
                 absl::Duration wall_step = absl::ZeroDuration()) {
    pipeline::Exchange ex;
    ex.authorization = authorization;
    ex.principal = *found;
    ex.principal_checked_ns = checked_ns;
    testing::FakeClock at;  // starts where clock_ did, which has not moved
    at.Advance(after_check);
    at.unix_us += absl::ToInt64Microseconds(wall_step);
    AuthenticateStage stage(*authenticator_, sink_, at);
    const pipeline::StageResult result = stage.OnRequest(ex);
    *status = ex.response.status;
    return result;
  };
  ASSERT_TRUE(store_->RevokeKey(key_.id, checked_us).ok());
  ASSERT_TRUE(keys_->Refresh().ok());
  int status = 0;
  EXPECT_EQ(run(absl::Milliseconds(100), &status), pipeline::StageResult::kContinue);
  EXPECT_EQ(sink_.events, 0);
  EXPECT_EQ(run(absl::Milliseconds(101), &status), pipeline::StageResult::kStop);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(sink_.events, 1);  // the refusal is audited as any other
  // The while is the monotonic clock's: a wall clock stepped back does not stretch it.
  EXPECT_EQ(run(absl::Milliseconds(101), &status, -absl::Hours(1)), pipeline::StageResult::kStop);

  // Expired between the header and the chain (the key expires 30 s after the clock's start).
  clock_.Advance(absl::Seconds(30) - absl::Milliseconds(10));
  const identity::NewApiKey other = PutKey("other", clock_.UnixMicros() + 5'000);
  ASSERT_TRUE(keys_->Refresh().ok());
  pipeline::Exchange ex;
  ex.authorization = "Bearer " + other.text;
  ex.principal_checked_ns = clock_.MonotonicNanos();
  auto other_found =
      authenticator_->Authenticate(ex.authorization, "", "data", clock_.UnixMicros());
  ASSERT_TRUE(other_found.ok()) << other_found.status();
  ex.principal = *other_found;
  clock_.Advance(absl::Milliseconds(6));
  AuthenticateStage stage(*authenticator_, sink_, clock_);
  EXPECT_EQ(stage.OnRequest(ex), pipeline::StageResult::kStop);
  EXPECT_EQ(ex.response.status, 401);
}

// A caller refused when its header arrived was answered with its body unread: the stage refuses
// it for the reason found then, and does not look at its credentials again.
TEST_F(AuthenticateStageTest, ACallerRefusedAtTheHeaderIsRefusedForThatReason) {
  pipeline::Exchange ex;
  ex.authorization = "Bearer " + key_.text;  // good now, but the body was not read
  ex.caller_refusal = "unknown API key";
  AuthenticateStage stage(*authenticator_, sink_, clock_);
  EXPECT_EQ(stage.OnRequest(ex), pipeline::StageResult::kStop);
  EXPECT_EQ(ex.response.status, 401);
  EXPECT_NE(ex.response.body.find("unknown API key"), std::string::npos) << ex.response.body;
  EXPECT_EQ(ex.principal, nullptr);
  EXPECT_EQ(sink_.events, 1);
}

}  // namespace
}  // namespace pillar::stages
