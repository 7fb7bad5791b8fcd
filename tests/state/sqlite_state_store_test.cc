#include <gtest/gtest.h>
#include <sys/stat.h>

#include "state/state_store.h"
#include "testing/temp_dir.h"

namespace pillar::state {
namespace {

ApiKeyRecord Key(const std::string& id) {
  return ApiKeyRecord{id, "name-" + id, std::string(32, 'h'), 100, {}};
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
