#include "common/file_watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/temp_dir.h"

namespace pillar {
namespace {

// Waits up to a second for `count` to reach `at_least`.
bool Reaches(const std::atomic<int>& count, int at_least) {
  for (int i = 0; i < 100 && count.load() < at_least; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return count.load() >= at_least;
}

TEST(FileWatcherTest, AChangeOfContentOrOfModeIsHandedOnAndNothingElse) {
  testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "watched.toml";
  std::ofstream(path) << "a = 1\n";
  std::atomic<int> applied{0};
  FileWatcher watcher(path.string(), "test file", absl::Milliseconds(10), 1 << 20,
                      [&](const std::string&) {
                        ++applied;
                        return absl::OkStatus();
                      });
  ASSERT_TRUE(watcher.LoadNow().ok());
  watcher.Start();
  EXPECT_EQ(applied.load(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(applied.load(), 1);  // unchanged: not applied again
  std::ofstream(path) << "a = 22\n";
  EXPECT_TRUE(Reaches(applied, 2));
  // A file refused for its mode is taken once the mode is fixed, though its content is the same.
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_TRUE(Reaches(applied, 3));
}

}  // namespace
}  // namespace pillar
