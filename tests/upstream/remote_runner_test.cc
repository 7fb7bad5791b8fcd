#include "upstream/remote_runner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "testing/temp_dir.h"
#include "upstream/upstream_metrics.h"

namespace pillar::upstream {
namespace {

models::ModelConfig RemoteConfig(const std::string& credentials) {
  models::ModelConfig c;
  c.platform = models::Platform::kRemote;
  c.inputs = {{"x", protocol::DataType::kFp32, {4}}};
  c.outputs = {{"y", protocol::DataType::kFp32, {2}}};
  models::RemoteEndpoint endpoint;
  endpoint.url = "http://127.0.0.1:9";
  c.remote.endpoints = {endpoint};
  c.remote.credentials_file = credentials;
  return c;
}

std::string Refusal(const std::string& credentials) {
  absl::StatusOr<std::unique_ptr<RemoteRunner>> runner =
      RemoteRunner::Create(RemoteConfig(credentials), "m", "1");
  EXPECT_FALSE(runner.ok()) << credentials;
  return std::string(runner.status().message());
}

// The runner made last for a version sets its state gauges each second; one a reload replaced,
// alive while its calls end, stops (review helper-114: its ticks flipped the new one's gauges).
TEST(GaugeOwnersTest, TheRunnerMadeLastForAVersionOwnsItsGauges) {
  UpstreamMetrics metrics;
  UpstreamMetrics copy = metrics;  // each runner holds a copy: the owners are shared
  const uint64_t old_runner = metrics.owners->Claim("digits", "1");
  EXPECT_TRUE(copy.owners->Owns("digits", "1", old_runner));
  const uint64_t other_version = copy.owners->Claim("digits", "2");
  EXPECT_TRUE(metrics.owners->Owns("digits", "1", old_runner));
  const uint64_t new_runner = copy.owners->Claim("digits", "1");
  EXPECT_FALSE(metrics.owners->Owns("digits", "1", old_runner));
  EXPECT_TRUE(metrics.owners->Owns("digits", "1", new_runner));
  EXPECT_TRUE(metrics.owners->Owns("digits", "2", other_version));
  EXPECT_FALSE(metrics.owners->Owns("digits1", "", new_runner));  // names do not run together
  EXPECT_FALSE(metrics.owners->Owns("other", "1", new_runner));
}

TEST(RemoteRunnerTest, TheCredentialsFileMustBeAPrivateRegularFile) {
  testing::TempDir dir;
  const std::string token = (dir.path() / "token").string();
  std::ofstream(token) << "s3cret\n";
  ::chmod(token.c_str(), 0600);
  EXPECT_TRUE(RemoteRunner::Create(RemoteConfig(token), "m", "1").ok());

  ::chmod(token.c_str(), 0640);
  EXPECT_NE(Refusal(token).find("is readable by group or others"), std::string::npos);

  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(Refusal(fifo).find("not a regular file"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));  // no hang

  std::filesystem::create_directory(dir.path() / "d");
  EXPECT_NE(Refusal((dir.path() / "d").string()).find("credentials_file"), std::string::npos);
  // A link is followed (Kubernetes mounts secrets through links); what it reaches is checked.
  ::chmod(token.c_str(), 0600);
  std::filesystem::create_symlink(token, dir.path() / "link");
  EXPECT_TRUE(RemoteRunner::Create(RemoteConfig((dir.path() / "link").string()), "m", "1").ok());
  ::chmod(token.c_str(), 0644);
  EXPECT_NE(Refusal((dir.path() / "link").string()).find("is readable by group or others"),
            std::string::npos);

  const std::string spaced = (dir.path() / "spaced").string();
  std::ofstream(spaced) << "two words\n";
  ::chmod(spaced.c_str(), 0600);
  EXPECT_NE(Refusal(spaced).find("must hold one token"), std::string::npos);
}

}  // namespace
}  // namespace pillar::upstream
