// `pillar keygen`, `pillar model sign` and `pillar model verify` as an operator runs them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

TEST(SigningCliTest, KeygenSignVerifyAndATamperedVersionFails) {
  testing::TempDir dir;
  const fs::path version = dir.path() / "store" / "digits" / "1";
  fs::create_directories(version);
  fs::copy(testing::DemoStore() / "digits" / "1" / "model.pt", version / "model.pt");
  fs::copy(testing::DemoStore() / "digits" / "1" / "model.toml", version / "model.toml");
  const std::string prefix = (dir.path() / "release").string();
  std::string out, err;
  ASSERT_EQ(testing::RunPillar({"keygen", "--out", prefix}, &out, &err), 0) << err;
  EXPECT_EQ(out.size(), 17u);  // the key id and a newline
  struct stat st {};
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(testing::RunPillar({"keygen", "--out", prefix}, &out, &err), 1);  // never overwrites

  ASSERT_EQ(testing::RunPillar({"model", "sign", version.string(), "--key", prefix + ".key"}, &out,
                               &err),
            0)
      << err;
  out.clear();
  ASSERT_EQ(testing::RunPillar({"model", "verify", version.string(), "--trusted-key",
                                prefix + ".pub"},
                               &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("verified digits/1 (2 files"), std::string::npos) << out;

  std::ofstream(version / "model.toml", std::ios::app) << "# appended\n";
  err.clear();
  EXPECT_EQ(testing::RunPillar({"model", "verify", version.string(), "--trusted-key",
                                prefix + ".pub"},
                               &out, &err),
            1);
  EXPECT_NE(err.find("model.toml changed after signing"), std::string::npos) << err;

  // Another key is not trusted.
  const std::string other = (dir.path() / "other").string();
  ASSERT_EQ(testing::RunPillar({"keygen", "--out", other}, &out, &err), 0);
  ASSERT_EQ(testing::RunPillar({"model", "sign", version.string(), "--key", other + ".key"}, &out,
                               &err),
            0);
  err.clear();
  EXPECT_EQ(testing::RunPillar({"model", "verify", version.string(), "--trusted-key",
                                prefix + ".pub"},
                               &out, &err),
            1);
  EXPECT_NE(err.find("no valid signature by a trusted key"), std::string::npos) << err;
  // A private key others can read is refused.
  ::chmod((prefix + ".key").c_str(), 0644);
  err.clear();
  EXPECT_EQ(testing::RunPillar({"model", "sign", version.string(), "--key", prefix + ".key"}, &out,
                               &err),
            1);
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
}

}  // namespace
}  // namespace pillar
