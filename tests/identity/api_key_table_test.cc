#include "identity/api_key_table.h"

#include <gtest/gtest.h>

#include <optional>

#include "absl/time/clock.h"
#include "identity/api_key.h"
#include "testing/fake_clock.h"
#include "testing/temp_dir.h"

namespace pillar::identity {
namespace {

constexpr int64_t kNow = 1'800'000'000'000'000;  // Unix microseconds

class ApiKeyTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*state::OpenSqliteStateStore((dir_.path() / "s.db").string()));
  }
  NewApiKey Add(const std::string& name, std::optional<int64_t> expires_us = std::nullopt) {
    NewApiKey key = GenerateApiKey();
    state::ApiKeyRecord r;
    r.id = key.id;
    r.name = name;
    r.secret_hash = key.secret_hash;
    r.created_us = 1;
    r.owner = "ops";
    r.tenant = "acme";
    r.roles = {"user"};
    r.attributes = {{"clearances", {"public"}}};
    r.expires_us = expires_us;
    EXPECT_TRUE(store_->PutKey(r).ok());
    return key;
  }
  testing::TempDir dir_;
  std::unique_ptr<state::StateStore> store_;
};

TEST_F(ApiKeyTableTest, AKnownKeyBecomesItsPrincipal) {
  NewApiKey key = Add("ci");
  ApiKeyTable keys(*store_, {.refresh_interval = absl::ZeroDuration()});
  ASSERT_TRUE(keys.Refresh().ok());
  auto who = keys.Verify(key.text, kNow);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ((*who)->id, "key:" + key.id);
  EXPECT_EQ((*who)->key_id, key.id);
  EXPECT_EQ((*who)->method, AuthMethod::kApiKey);
  EXPECT_EQ((*who)->tenant, "acme");
  EXPECT_EQ((*who)->roles, std::vector<std::string>{"user"});
  EXPECT_EQ((*who)->attributes.at("clearances"), std::vector<std::string>{"public"});
  EXPECT_EQ((*who)->attributes.at("owner"), std::vector<std::string>{"ops"});
  // The same principal object serves every request with the key: no per-request copies.
  EXPECT_EQ(keys.Verify(key.text, kNow)->get(), who->get());
}

TEST_F(ApiKeyTableTest, RefusesWithPreciseReasons) {
  NewApiKey key = Add("x");
  NewApiKey expiring = Add("short", kNow + 10);
  NewApiKey stranger = GenerateApiKey();
  ApiKeyTable keys(*store_, {.refresh_interval = absl::ZeroDuration()});
  ASSERT_TRUE(keys.Refresh().ok());
  auto message = [&](const std::string& text, int64_t now = kNow) {
    auto who = keys.Verify(text, now);
    EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << text;
    return std::string(who.status().message());
  };
  EXPECT_EQ(message("abc"), "malformed API key");
  EXPECT_EQ(message(stranger.text), "unknown API key");
  // Right id, wrong secret.
  EXPECT_EQ(message(key.text.substr(0, 16) + stranger.text.substr(16)), "unknown API key");
  EXPECT_TRUE(keys.Verify(expiring.text, kNow + 9).ok());
  EXPECT_EQ(message(expiring.text, kNow + 10), "API key expired");
  ASSERT_TRUE(store_->RevokeKey(key.id, 2).ok());
  ASSERT_TRUE(keys.Refresh().ok());
  EXPECT_EQ(message(key.text), "API key revoked");
}

TEST_F(ApiKeyTableTest, RotationKeepsBothKeysWorkingUntilTheOverlapEnds) {
  NewApiKey old_key = Add("svc");
  ApiKeyTable keys(*store_, {.refresh_interval = absl::ZeroDuration()});
  ASSERT_TRUE(keys.Refresh().ok());
  NewApiKey successor = GenerateApiKey();
  state::ApiKeyRecord r;
  r.id = successor.id;
  r.name = "svc";
  r.secret_hash = successor.secret_hash;
  r.tenant = "acme";
  r.roles = {"user"};
  ASSERT_TRUE(store_->RotateKey(old_key.id, r, kNow + 1000).ok());
  ASSERT_TRUE(keys.Refresh().ok());
  EXPECT_TRUE(keys.Verify(old_key.text, kNow).ok());
  EXPECT_TRUE(keys.Verify(successor.text, kNow).ok());
  EXPECT_EQ(keys.Verify(old_key.text, kNow + 1000).status().message(), "API key expired");
  EXPECT_TRUE(keys.Verify(successor.text, kNow + 1000).ok());
}

TEST_F(ApiKeyTableTest, AKeyMadeByRotationsSucceedsEachKeyBeforeIt) {
  // What the keys before it owned (their jobs) is its own (review helper-133: a rotation
  // stranded a key's job results).
  NewApiKey first = Add("svc");
  auto rotate = [&](const std::string& from) {
    NewApiKey next = GenerateApiKey();
    state::ApiKeyRecord r;
    r.id = next.id;
    r.name = "svc";
    r.secret_hash = next.secret_hash;
    EXPECT_TRUE(store_->RotateKey(from, r, kNow + 1000).ok());
    return next;
  };
  NewApiKey second = rotate(first.id);
  NewApiKey third = rotate(second.id);
  NewApiKey unrelated = Add("other");
  ApiKeyTable keys(*store_, {.refresh_interval = absl::ZeroDuration()});
  ASSERT_TRUE(keys.Refresh().ok());
  auto succeeds = [&](const NewApiKey& key) { return (*keys.Verify(key.text, kNow))->succeeds; };
  EXPECT_EQ(succeeds(third), (std::vector<std::string>{"key:" + second.id, "key:" + first.id}));
  EXPECT_EQ(succeeds(second), (std::vector<std::string>{"key:" + first.id}));
  EXPECT_TRUE(succeeds(first).empty());
  EXPECT_TRUE(succeeds(unrelated).empty());
}

TEST_F(ApiKeyTableTest, LastUsedTimesReachTheStoreAndSurviveReloads) {
  NewApiKey key = Add("used");
  NewApiKey idle = Add("idle");
  ApiKeyTable keys(*store_, {.refresh_interval = absl::ZeroDuration()});
  ASSERT_TRUE(keys.Refresh().ok());
  ASSERT_TRUE(keys.Verify(key.text, kNow).ok());
  Add("another");  // changes the generation: the next Refresh builds a new snapshot
  ASSERT_TRUE(keys.Refresh().ok());
  ASSERT_TRUE(keys.FlushLastUsed().ok());
  auto records = store_->ListKeys();
  ASSERT_TRUE(records.ok());
  for (const auto& r : *records) {
    if (r.id == key.id) {
      EXPECT_EQ(r.last_used_us, kNow);
    }
    if (r.id == idle.id) {
      EXPECT_FALSE(r.last_used_us.has_value());
    }
  }
}

TEST_F(ApiKeyTableTest, TheBackgroundThreadWritesLastUseBackWhenItsClockSaysSo) {
  NewApiKey key = Add("used");
  testing::FakeClock clock;
  ApiKeyTable keys(*store_, {.refresh_interval = absl::Milliseconds(5),
                             .touch_interval = absl::Hours(1),
                             .clock = &clock});
  ASSERT_TRUE(keys.Refresh().ok());
  ASSERT_TRUE(keys.Verify(key.text, kNow).ok());
  auto last_used = [&]() -> std::optional<int64_t> {
    auto records = store_->ListKeys();
    EXPECT_TRUE(records.ok());
    for (const auto& r : *records) {
      if (r.id == key.id) return r.last_used_us;
    }
    return std::nullopt;
  };
  // Many refreshes go by in real time; the hour has not, so nothing is written.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(last_used().has_value());
  clock.Advance(absl::Hours(1));
  std::optional<int64_t> written;
  for (int i = 0; i < 400 && !written; ++i) {
    written = last_used();
    if (!written) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(written, std::optional<int64_t>(kNow));
}

TEST_F(ApiKeyTableTest, BackgroundRefreshSeesNewKeys) {
  ApiKeyTable keys(*store_, {.refresh_interval = absl::Milliseconds(5)});
  ASSERT_TRUE(keys.Refresh().ok());
  NewApiKey key = Add("late");
  bool accepted = false;
  for (int i = 0; i < 400 && !accepted; ++i) {
    accepted = keys.Verify(key.text, kNow).ok();
    if (!accepted) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(accepted);
}

}  // namespace
}  // namespace pillar::identity
