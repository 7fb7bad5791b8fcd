#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "state/state_store.h"
#include "testing/temp_dir.h"

namespace pillar::state {
namespace {

ApiKeyRecord Key(const std::string& id) {
  ApiKeyRecord r;
  r.id = id;
  r.name = "name-" + id;
  r.secret_hash = std::string(32, 'h');
  r.created_us = 100;
  return r;
}

TEST(SqliteStateStoreTest, KeepsEveryLifecycleField) {
  testing::TempDir dir;
  auto store = OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok()) << store.status();
  ApiKeyRecord k = Key("a");
  k.owner = "ops@acme";
  k.tenant = "acme";
  k.roles = {"user", "auditor"};
  k.attributes = {{"clearances", {"public", "internal"}}, {"team", {"ml"}}};
  k.expires_us = 5000;
  ASSERT_TRUE((*store)->PutKey(k).ok());
  ASSERT_TRUE((*store)->TouchKeys({{"a", 300}, {"a", 200}}).ok());  // never backwards
  auto keys = (*store)->ListKeys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  const ApiKeyRecord& got = (*keys)[0];
  EXPECT_EQ(got.owner, "ops@acme");
  EXPECT_EQ(got.tenant, "acme");
  EXPECT_EQ(got.roles, (std::vector<std::string>{"user", "auditor"}));
  EXPECT_EQ(got.attributes, k.attributes);
  EXPECT_EQ(got.expires_us, 5000);
  EXPECT_EQ(got.last_used_us, 300);
}

TEST(SqliteStateStoreTest, RotationAddsTheSuccessorAndBoundsTheOldKey) {
  testing::TempDir dir;
  auto store = OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok());
  ApiKeyRecord old = Key("old");
  old.expires_us = 1000;
  ASSERT_TRUE((*store)->PutKey(old).ok());
  const int64_t g0 = *(*store)->KeysGeneration();
  // An overlap ending after the old expiry keeps the earlier time.
  ASSERT_TRUE((*store)->RotateKey("old", Key("new"), 9999).ok());
  EXPECT_GT(*(*store)->KeysGeneration(), g0);
  auto keys = (*store)->ListKeys();
  ASSERT_EQ(keys->size(), 2u);
  const ApiKeyRecord& first = (*keys)[0].id == "old" ? (*keys)[0] : (*keys)[1];
  EXPECT_EQ(first.expires_us, 1000);
  EXPECT_EQ(first.replaced_by, "new");
  EXPECT_EQ((*store)->RotateKey("nope", Key("x"), 1).code(), absl::StatusCode::kNotFound);
  // Once (review helper-134: a second rotation took the old key's jobs from its successor).
  const absl::Status again = (*store)->RotateKey("old", Key("other"), 1);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(),
            "key old was rotated already; new is its live successor: rotate that one");
  ASSERT_TRUE((*store)->RevokeKey("new", 5).ok());
  EXPECT_EQ((*store)->RotateKey("new", Key("y"), 1).code(), absl::StatusCode::kFailedPrecondition);
  // A failed rotation adds nothing.
  EXPECT_EQ((*store)->ListKeys()->size(), 2u);
  // Its successor revoked, the key can be rotated again, to a successor that takes its place
  // (review helper-136: the chain could not be taken up again).
  ASSERT_TRUE((*store)->RotateKey("old", Key("other"), 1).ok());
  keys = (*store)->ListKeys();
  ASSERT_EQ(keys->size(), 3u);
  for (const ApiKeyRecord& k : *keys) {
    if (k.id == "old") {
      EXPECT_EQ(k.replaced_by, "other");
    }
  }
  EXPECT_EQ((*store)->RotateKey("old", Key("third"), 1).code(),
            absl::StatusCode::kFailedPrecondition);
  // Not while a key further on lives (review helper-137: old -> other -> next with other revoked,
  // and a new successor of old took its jobs from next, the live key).
  ASSERT_TRUE((*store)->RotateKey("other", Key("next"), 1).ok());
  ASSERT_TRUE((*store)->RevokeKey("other", 6).ok());
  const absl::Status past = (*store)->RotateKey("old", Key("fork"), 1);
  EXPECT_EQ(past.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(past.message(),
            "key old was rotated already; next is its live successor: rotate that one");
  ASSERT_TRUE((*store)->RevokeKey("next", 7).ok());
  EXPECT_TRUE((*store)->RotateKey("old", Key("fresh"), 1).ok());
}

TEST(SqliteStateStoreTest, QuotaUsageAccumulatesPerCounterAndPeriod) {
  testing::TempDir dir;
  auto store = OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->AddQuotaUsage({{"daily|acme", 86400, 5}, {"daily|acme", 86400, 2}}).ok());
  ASSERT_TRUE((*store)->AddQuotaUsage({{"daily|acme", 0, 9}, {"daily|beta", 86400, 1}}).ok());
  auto usage = (*store)->LoadQuotaUsage(86400);
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 2u);
  int64_t acme = 0;
  for (const QuotaUsage& u : *usage) {
    if (u.counter == "daily|acme") acme = u.used;
  }
  EXPECT_EQ(acme, 7);
}

TEST(SqliteStateStoreTest, MigratesASchemaOneFileInPlace) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "old.db").string();
  // The issue-2 schema, as a pillar of that time wrote it.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
                           "INSERT INTO meta VALUES ('schema_version', 1), ('keys_generation', 3);"
                           "CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL,"
                           " secret_hash BLOB NOT NULL, created_us INTEGER NOT NULL,"
                           " revoked_us INTEGER);"
                           "INSERT INTO api_keys VALUES ('k1', 'old key', x'00', 7, NULL);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = OpenSqliteStateStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto keys = (*store)->ListKeys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].name, "old key");
  EXPECT_TRUE((*keys)[0].roles.empty());
  EXPECT_FALSE((*keys)[0].expires_us.has_value());
  ASSERT_TRUE((*store)->AddQuotaUsage({{"q", 1, 1}}).ok());
  EXPECT_EQ(*(*store)->RaiseHighWater("aliases/digits", 3), 3);  // schema 3 reached too
  EXPECT_EQ((*store)->GetJob("none").status().code(), absl::StatusCode::kNotFound);  // and 4
}

// A high-water mark only rises, across connections and reopenings: a replayed (older) signed
// aliases file is refused after a restart too.
TEST(SqliteStateStoreTest, HighWaterMarksNeverMoveBackwards) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "s.db").string();
  {
    auto store = OpenSqliteStateStore(path);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(*(*store)->RaiseHighWater("aliases/digits", 0), 0);
    EXPECT_EQ(*(*store)->RaiseHighWater("aliases/digits", 5), 5);
    EXPECT_EQ(*(*store)->RaiseHighWater("aliases/digits", 2), 5);
    EXPECT_EQ(*(*store)->RaiseHighWater("aliases/other", 1), 1);
  }
  auto again = OpenSqliteStateStore(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->RaiseHighWater("aliases/digits", 4), 5);
  EXPECT_EQ(*(*again)->RaiseHighWater("aliases/digits", 6), 6);
}

TEST(SqliteStateStoreTest, PutListRevoke) {
  testing::TempDir dir;
  auto store = OpenSqliteStateStore((dir.path() / "s.db").string());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutKey(Key("a")).ok());
  ASSERT_TRUE((*store)->PutKey(Key("b")).ok());
  EXPECT_EQ((*store)->PutKey(Key("a")).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE((*store)->RevokeKey("b", 200).ok());
  ASSERT_TRUE((*store)->RevokeKey("b", 300).ok());  // the first revocation time stays
  EXPECT_EQ((*store)->RevokeKey("zz", 1).code(), absl::StatusCode::kNotFound);
  auto keys = (*store)->ListKeys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].secret_hash, std::string(32, 'h'));
  EXPECT_FALSE((*keys)[0].revoked_us.has_value());
  EXPECT_EQ((*keys)[1].revoked_us, 200);
}

TEST(SqliteStateStoreTest, GenerationChangesOnEveryWriteSeenFromAnotherConnection) {
  testing::TempDir dir;
  std::string path = (dir.path() / "s.db").string();
  auto writer = OpenSqliteStateStore(path);
  auto reader = OpenSqliteStateStore(path);
  ASSERT_TRUE(writer.ok() && reader.ok());
  int64_t g0 = *(*reader)->KeysGeneration();
  ASSERT_TRUE((*writer)->PutKey(Key("a")).ok());
  int64_t g1 = *(*reader)->KeysGeneration();
  EXPECT_NE(g0, g1);
  ASSERT_TRUE((*writer)->RevokeKey("a", 5).ok());
  EXPECT_NE(*(*reader)->KeysGeneration(), g1);
  EXPECT_EQ((*reader)->ListKeys()->size(), 1u);
}

TEST(SqliteStateStoreTest, FileIsOwnerOnly) {
  testing::TempDir dir;
  std::string path = (dir.path() / "s.db").string();
  ASSERT_TRUE(OpenSqliteStateStore(path).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(SqliteStateStoreTest, CorruptFileIsAnErrorNotACrash) {
  testing::TempDir dir;
  std::string path = (dir.path() / "s.db").string();
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("this is not a database, just some bytes long enough to look like a header.......", f);
  std::fclose(f);
  auto store = OpenSqliteStateStore(path);
  EXPECT_FALSE(store.ok());
}

TEST(SqliteStateStoreTest, UnwritableLocationIsAnError) {
  EXPECT_FALSE(OpenSqliteStateStore("/nonexistent-dir/s.db").ok());
}

}  // namespace
}  // namespace pillar::state
