#include "identity/authenticator.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "identity/api_key.h"
#include "testing/temp_dir.h"

namespace pillar::identity {
namespace {

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*state::OpenSqliteStateStore((dir_.path() / "s.db").string()));
  }
  NewApiKey Add(const std::string& name) {
    NewApiKey key = GenerateApiKey();
    EXPECT_TRUE(store_->PutKey({key.id, name, key.secret_hash, 1, std::nullopt}).ok());
    return key;
  }
  testing::TempDir dir_;
  std::unique_ptr<state::StateStore> store_;
};

TEST_F(AuthenticatorTest, AcceptsAKnownKeyAndNamesThePrincipal) {
  NewApiKey key = Add("ci");
  Authenticator auth(*store_, absl::ZeroDuration());
  ASSERT_TRUE(auth.Refresh().ok());
  absl::StatusOr<Principal> who = auth.Authenticate("Bearer " + key.text);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->key_id, key.id);
  EXPECT_EQ(who->key_name, "ci");
}

TEST_F(AuthenticatorTest, RefusesWithPreciseReasons) {
  NewApiKey key = Add("x");
  NewApiKey stranger = GenerateApiKey();
  Authenticator auth(*store_, absl::ZeroDuration());
  ASSERT_TRUE(auth.Refresh().ok());
  auto message = [&](const std::string& header) {
    absl::StatusOr<Principal> who = auth.Authenticate(header);
    EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << header;
    return std::string(who.status().message());
  };
  EXPECT_EQ(message(""), "missing Authorization header");
  EXPECT_EQ(message("Basic abc"), "Authorization header must be 'Bearer <api key>'");
  EXPECT_EQ(message("Bearer"), "Authorization header must be 'Bearer <api key>'");
  EXPECT_EQ(message("Bearer abc"), "malformed API key");
  EXPECT_EQ(message("Bearer " + stranger.text), "unknown API key");
  // Right id, wrong secret.
  std::string forged = key.text.substr(0, 16) + stranger.text.substr(16);
  EXPECT_EQ(message("Bearer " + forged), "unknown API key");
  ASSERT_TRUE(store_->RevokeKey(key.id, 2).ok());
  ASSERT_TRUE(auth.Refresh().ok());
  EXPECT_EQ(message("Bearer " + key.text), "API key revoked");
}

TEST_F(AuthenticatorTest, BackgroundRefreshSeesNewKeys) {
  Authenticator auth(*store_, absl::Milliseconds(5));
  ASSERT_TRUE(auth.Refresh().ok());
  NewApiKey key = Add("late");
  bool accepted = false;
  for (int i = 0; i < 400 && !accepted; ++i) {
    accepted = auth.Authenticate("Bearer " + key.text).ok();
    if (!accepted) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(accepted);
}

}  // namespace
}  // namespace pillar::identity
