#include "models/model_repository.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "testing/temp_dir.h"

namespace pillar::models {
namespace {

constexpr const char* kToml = R"(platform = "torchscript"
[[input]]
name = "x"
datatype = "FP32"
shape = [1]
[[output]]
name = "y"
datatype = "FP32"
shape = [1]
)";

class ModelRepositoryTest : public ::testing::Test {
 protected:
  void AddVersion(const std::string& model, const std::string& version,
                  const std::string& toml = kToml) {
    std::filesystem::create_directories(root_ / model / version);
    std::ofstream(root_ / model / version / "model.toml") << toml;
  }
  testing::TempDir dir_;
  const std::filesystem::path root_ = dir_.path();
};

TEST_F(ModelRepositoryTest, AppliesDefaultAndPerModelPolicies) {
  AddVersion("a", "1");
  AddVersion("a", "2");
  AddVersion("b", "1");
  AddVersion("b", "10");
  AddVersion("b", "not-a-version");
  ModelRepository repo(root_, VersionPolicy::Latest(), {{"b", *VersionPolicy::Parse("all")}});
  ScanResult scan = repo.Scan();
  ASSERT_EQ(scan.versions.size(), 3u);
  EXPECT_EQ(scan.versions[0].model, "a");
  EXPECT_EQ(scan.versions[0].version, 2);
  EXPECT_EQ(scan.versions[1].version, 1);
  EXPECT_EQ(scan.versions[2].version, 10);
}

// The scan lists versions and reads no version's files: model.toml is parsed by the loader from
// the bytes it verified, so a version with a broken (or swapped) model.toml is still listed and
// fails at load, where its signature is checked first.
TEST_F(ModelRepositoryTest, BrokenModelsAreReportedNotFatalAndVersionFilesAreNotRead) {
  AddVersion("good", "1");
  AddVersion("bad", "1", "platform = [");
  std::filesystem::create_directories(root_ / "noversions");
  std::filesystem::create_directories(root_ / "missing-toml" / "1");
  std::filesystem::create_directories(root_ / "bad name!");
  ScanResult scan = ModelRepository(root_, VersionPolicy::Latest(), {}).Scan();
  ASSERT_EQ(scan.versions.size(), 3u);
  EXPECT_EQ(scan.versions[0].model, "bad");
  EXPECT_EQ(scan.versions[1].model, "good");
  EXPECT_EQ(scan.versions[2].model, "missing-toml");
  ASSERT_EQ(scan.model_errors.size(), 2u);
  EXPECT_EQ(scan.model_errors[0].first, "bad name!");
  EXPECT_EQ(scan.model_errors[1].first, "noversions");
}

TEST_F(ModelRepositoryTest, MissingStoreIsAnError) {
  ScanResult scan = ModelRepository(root_ / "nope", VersionPolicy::Latest(), {}).Scan();
  EXPECT_TRUE(scan.versions.empty());
  ASSERT_EQ(scan.model_errors.size(), 1u);
}

// "01" and "1" would both be version 1 (loaded twice, under every policy that chose 1); a
// number past kMaxVersion would overflow the next push's "+ 1".
TEST_F(ModelRepositoryTest, OnlyCanonicalVersionNamesAreVersions) {
  AddVersion("a", "1");
  for (const char* odd :
       {"01", "001", "+2", "-3", "0", "9223372036854775807", "1000000000000000000", " 4", "5 "}) {
    AddVersion("a", odd);
  }
  EXPECT_EQ(VersionsIn(root_ / "a"), std::vector<int64_t>{1});
  ScanResult scan = ModelRepository(root_, *VersionPolicy::Parse("all"), {}).Scan();
  ASSERT_EQ(scan.versions.size(), 1u);
  EXPECT_EQ(scan.versions[0].version, 1);
  EXPECT_EQ(ParseVersion("999999999999999999"), kMaxVersion);
  EXPECT_FALSE(ParseVersion("01").has_value());
  // A link to a version directory is not a version (it would be served from wherever it points).
  std::filesystem::create_directory_symlink(root_ / "a" / "1", root_ / "a" / "7");
  EXPECT_EQ(VersionsIn(root_ / "a"), std::vector<int64_t>{1});
}

TEST(ModelNameTest, Validity) {
  EXPECT_TRUE(IsValidModelName("digits-lite_2.1"));
  EXPECT_FALSE(IsValidModelName(""));
  EXPECT_FALSE(IsValidModelName(".hidden"));
  EXPECT_FALSE(IsValidModelName("a/b"));
  EXPECT_FALSE(IsValidModelName("a b"));
}

}  // namespace
}  // namespace pillar::models
