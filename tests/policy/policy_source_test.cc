#include "policy/policy_source.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "absl/time/clock.h"
#include "testing/temp_dir.h"

namespace pillar::policy {
namespace {

std::string Rules(const std::string& role) {
  return "version = 1\n[[rule]]\nname = \"r\"\nroles = [\"" + role +
         "\"]\nactions = [\"infer\"]\nresources = [\"*\"]\n";
}

TEST(PolicySourceTest, ReloadsAChangedFileAndKeepsTheOldPolicyWhenTheNewOneIsBad) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "policy.toml").string();
  std::ofstream(path) << Rules("a");
  auto source = PolicySource::Open(path, absl::Milliseconds(10));
  ASSERT_TRUE(source.ok()) << source.status();
  identity::Principal b;
  b.id = "b";
  b.roles = {"b"};
  EXPECT_FALSE((*source)->Current()->Allowed(b, Plane::kData, "infer", {"x", nullptr}));

  std::ofstream(path) << "version = 1\n[[rule]]\nname = 3\n";  // broken
  for (int i = 0; i < 300 && (*source)->failures() == 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ((*source)->failures(), 1);
  EXPECT_EQ((*source)->Current()->rules().size(), 1u);  // the old policy still answers

  std::ofstream(path) << Rules("b");
  bool allowed = false;
  for (int i = 0; i < 300 && !allowed; ++i) {
    allowed = (*source)->Current()->Allowed(b, Plane::kData, "infer", {"x", nullptr});
    if (!allowed) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(allowed);
  EXPECT_GE((*source)->reloads(), 1);
}

TEST(PolicySourceTest, AnInvalidFileAtStartIsAnError) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "policy.toml").string();
  std::ofstream(path) << "version = 1\n[[rule]]\n";
  auto source = PolicySource::Open(path, absl::Milliseconds(10));
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PolicySource::Open((dir.path() / "missing.toml").string(), absl::Seconds(1)).ok());
}

TEST(PolicySourceTest, AFileOthersMayWriteIsRefusedAtStartAndOnReload) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "policy.toml").string();
  std::ofstream(path) << Rules("a");
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  auto refused = PolicySource::Open(path, absl::Milliseconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();

  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto source = PolicySource::Open(path, absl::Milliseconds(10));
  ASSERT_TRUE(source.ok()) << source.status();
  // Someone else may now write it, and does: the new rules are not taken.
  ASSERT_EQ(::chmod(path.c_str(), 0620), 0);
  std::ofstream(path) << Rules("b");
  for (int i = 0; i < 300 && (*source)->failures() == 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE((*source)->failures(), 1);
  identity::Principal b;
  b.id = "b";
  b.roles = {"b"};
  EXPECT_FALSE((*source)->Current()->Allowed(b, Plane::kData, "infer", {"x", nullptr}));
}

}  // namespace
}  // namespace pillar::policy
