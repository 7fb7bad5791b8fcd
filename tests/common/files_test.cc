#include "common/files.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/temp_dir.h"

namespace pillar {
namespace {

TEST(FilesTest, ReadsASmallRegularFile) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "a.toml") << "x = 1\n";
  absl::StatusOr<std::string> text = ReadSmallFile(dir.path() / "a.toml", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "x = 1\n");
}

TEST(FilesTest, RefusesWhatWouldHangOrExhaustMemory) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "big") << std::string(101, 'x');
  EXPECT_EQ(ReadSmallFile(dir.path() / "big", 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  // /dev/zero never ends; a directory is not a file.
  EXPECT_EQ(ReadSmallFile("/dev/zero", 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(dir.path(), 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(dir.path() / "missing", 100).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pillar
