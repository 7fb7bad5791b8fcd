// `pillar keygen`, `pillar model sign` and `pillar model verify` as an operator runs them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "signing/model_manifest.h"
#include "testing/http_client.h"
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

  ASSERT_EQ(
      testing::RunPillar({"model", "sign", version.string(), "--key", prefix + ".key"}, &out, &err),
      0)
      << err;
  out.clear();
  ASSERT_EQ(
      testing::RunPillar({"model", "verify", version.string(), "--trusted-key", prefix + ".pub"},
                         &out, &err),
      0)
      << err;
  EXPECT_NE(out.find("verified digits/1 (2 files"), std::string::npos) << out;  // pt + toml

  // `model show` prints the version, its signature check and the lineage it carries.
  fs::copy(testing::DemoStore() / "digits" / "1" / "lineage.json", version / "lineage.json");
  ASSERT_EQ(
      testing::RunPillar({"model", "sign", version.string(), "--key", prefix + ".key"}, &out, &err),
      0);
  out.clear();
  ASSERT_EQ(testing::RunPillar(
                {"model", "show", version.string(), "--trusted-key", prefix + ".pub"}, &out, &err),
            0);
  EXPECT_NE(out.find("signature  verified: digits/1 signed by key"), std::string::npos) << out;
  EXPECT_NE(
      out.find("\"sha256\": \"faf2d98f61250c1cdc0b114323133d3c58da04f5c5d28bb78e4bde3c936a75b1\""),
      std::string::npos)
      << out;  // the training data's digest
  EXPECT_NE(out.find("lineage.json"), std::string::npos);

  std::ofstream(version / "model.toml", std::ios::app) << "# appended\n";
  err.clear();
  EXPECT_EQ(
      testing::RunPillar({"model", "verify", version.string(), "--trusted-key", prefix + ".pub"},
                         &out, &err),
      1);
  EXPECT_NE(err.find("model.toml changed after signing"), std::string::npos) << err;

  // Another key is not trusted.
  const std::string other = (dir.path() / "other").string();
  ASSERT_EQ(testing::RunPillar({"keygen", "--out", other}, &out, &err), 0);
  ASSERT_EQ(
      testing::RunPillar({"model", "sign", version.string(), "--key", other + ".key"}, &out, &err),
      0);
  err.clear();
  EXPECT_EQ(
      testing::RunPillar({"model", "verify", version.string(), "--trusted-key", prefix + ".pub"},
                         &out, &err),
      1);
  EXPECT_NE(err.find("no valid signature by a trusted key"), std::string::npos) << err;
  // A private key others can read is refused.
  ::chmod((prefix + ".key").c_str(), 0644);
  err.clear();
  EXPECT_EQ(
      testing::RunPillar({"model", "sign", version.string(), "--key", prefix + ".key"}, &out, &err),
      1);
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
}

int Status(uint16_t port, const std::string& key, const std::string& model) {
  return testing::Fetch(port, "GET", "/v2/models/" + model + "/ready", "", {testing::Bearer(key)})
      .status;
}

TEST(SignedServingTest, OnlyVersionsSignedByATrustedKeyAreServed) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  server.SetStore(store);
  server.SetSignStore(false);  // this test signs, tampers and leaves unsigned by hand
  const std::string prefix = (server.dir() / "trust").string();
  ASSERT_TRUE(signing::WriteKeyPair(signing::GenerateSigningKey(), prefix).ok());
  auto key = signing::ReadPrivateKey(prefix + ".key");
  ASSERT_TRUE(key.ok());
  // digits: signed and intact. digits-lite: signed, then a weight byte changed.
  ASSERT_TRUE(signing::SignModel((store / "digits" / "1").string(), "digits/1", *key).ok());
  ASSERT_TRUE(
      signing::SignModel((store / "digits-lite" / "1").string(), "digits-lite/1", *key).ok());
  {
    std::fstream f(store / "digits-lite" / "1" / "model.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x7f');
  }
  // unsigned: a copy of digits without a manifest.
  fs::create_directories(store / "unsigned" / "1");
  fs::copy(store / "digits" / "1" / "model.pt", store / "unsigned" / "1" / "model.pt");
  fs::copy(store / "digits" / "1" / "model.toml", store / "unsigned" / "1" / "model.toml");
  const std::string api_key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();

  EXPECT_EQ(Status(server.data_port(), api_key, "digits"), 200);
  EXPECT_EQ(Status(server.data_port(), api_key, "digits-lite"), 400);  // not ready
  EXPECT_EQ(Status(server.data_port(), api_key, "unsigned"), 400);
  const std::string models =
      testing::Fetch(server.admin_port(), "GET", "/admin/v1/models", "", {testing::Bearer(api_key)})
          .body;
  EXPECT_NE(models.find("signature check failed: "), std::string::npos) << models;
  EXPECT_NE(models.find("model.pt changed after signing"), std::string::npos) << models;
  EXPECT_NE(models.find("is not signed (no model.sig.json)"), std::string::npos) << models;
  EXPECT_EQ(server.Stop(), 0);
}

TEST(SignedServingTest, AVersionTamperedWithWhileServingIsWithdrawnAndTrafficMovesOn) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  fs::copy(store / "digits" / "1", store / "digits" / "2", fs::copy_options::recursive);
  server.SetStore(store);
  server.AddRepositoryConfig("version_policy = \"all\"\nreverify_interval_ms = 50\n");
  const std::string key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string body = testing::InferBody({&testing::LoadHeldOut()[0]});
  auto infer = [&] {
    return testing::Fetch(server.data_port(), "POST", "/v2/models/digits/infer", body,
                          {testing::Bearer(key)});
  };
  testing::HttpReply before = infer();
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_NE(before.body.find("\"model_version\":\"2\""), std::string::npos);
  // Someone swaps version 2's weights on disk.
  {
    std::fstream f(store / "digits" / "2" / "model.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x01');
  }
  bool moved = false;
  for (int i = 0; i < 200 && !moved; ++i) {
    testing::HttpReply r = infer();
    moved = r.status == 200 && r.body.find("\"model_version\":\"1\"") != std::string::npos;
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(moved);
  const std::string models =
      testing::Fetch(server.admin_port(), "GET", "/admin/v1/models", "", {testing::Bearer(key)})
          .body;
  EXPECT_NE(models.find("signature check failed while serving: "), std::string::npos) << models;
  EXPECT_NE(server.Log().find("ALERT: model digits version 2 withdrawn"), std::string::npos);
  const std::string metrics =
      testing::Fetch(server.admin_port(), "GET", "/metrics", "", {testing::Bearer(key)}).body;
  EXPECT_NE(metrics.find("pillar_security_decisions_total{kind=\"model\",decision=\"failed\"} 1"),
            std::string::npos);
  EXPECT_EQ(server.Stop(), 0);
}

// The full re-verification runs every ten minutes here; a changed file is noticed by its
// modification time within poll_ms and verified at once.
TEST(SignedServingTest, AChangedFileIsVerifiedAtOnceNotAtTheNextFullPass) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  fs::copy(store / "digits" / "1", store / "digits" / "2", fs::copy_options::recursive);
  server.SetStore(store);
  server.AddRepositoryConfig(
      "version_policy = \"all\"\nreverify_interval_ms = 600000\npoll_ms = 50\n");
  const std::string key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string body = testing::InferBody({&testing::LoadHeldOut()[0]});
  auto version = [&] {
    testing::HttpReply r = testing::Fetch(server.data_port(), "POST", "/v2/models/digits/infer",
                                          body, {testing::Bearer(key)});
    return r.status == 200 && r.body.find("\"model_version\":\"1\"") != std::string::npos ? 1
           : r.status == 200                                                              ? 2
                                                                                          : 0;
  };
  ASSERT_EQ(version(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the watcher has seen it
  {
    std::fstream f(store / "digits" / "2" / "model.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x02');
  }
  const auto start = std::chrono::steady_clock::now();
  while (version() != 1 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(version(), 1);
  EXPECT_NE(server.Log().find("ALERT: model digits version 2 withdrawn"), std::string::npos);
  EXPECT_EQ(server.Stop(), 0);
}

// The review: a file edited in place with its size kept and its modification time set back
// (utime) waited for the next full pass; its change time moves all the same.
TEST(SignedServingTest, AnEditThatRestoresTheModificationTimeIsStillNoticedAtOnce) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  fs::copy(store / "digits" / "1", store / "digits" / "2", fs::copy_options::recursive);
  server.SetStore(store);
  server.AddRepositoryConfig(
      "version_policy = \"all\"\nreverify_interval_ms = 600000\npoll_ms = 50\n");
  const std::string key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watcher has seen it
  const fs::path lineage = store / "digits" / "2" / "lineage.json";
  struct stat before {};
  ASSERT_EQ(::stat(lineage.c_str(), &before), 0);
  {
    std::fstream f(lineage, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('X');
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, lineage.c_str(), times, 0), 0);
  const auto start = std::chrono::steady_clock::now();
  while (server.Log().find("ALERT: model digits version 2 withdrawn") == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(server.Log().find("ALERT: model digits version 2 withdrawn"), std::string::npos);
  EXPECT_EQ(server.Stop(), 0);
}

// The finding: copies of digits/1 put at digits/2 to digits/6 were served as those versions,
// and `pillar model verify` said "verified digits/1" of them. A signature names its model and
// version, and the server and the CLI hold it to the place the files sit.
TEST(SignedServingTest, ACopyOfASignedVersionIsNotServedAsAnotherVersion) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  server.SetStore(store);
  server.SetSignStore(false);
  const std::string prefix = (server.dir() / "trust").string();
  ASSERT_TRUE(signing::WriteKeyPair(signing::GenerateSigningKey(), prefix).ok());
  auto key = signing::ReadPrivateKey(prefix + ".key");
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(signing::SignModel((store / "digits" / "1").string(), "digits/1", *key).ok());
  for (const char* copy : {"2", "6"}) {
    fs::copy(store / "digits" / "1", store / "digits" / copy, fs::copy_options::recursive);
  }
  server.AddRepositoryConfig("version_policy = \"all\"\n");
  const std::string api_key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string body = testing::InferBody({&testing::LoadHeldOut()[0]});
  testing::HttpReply r = testing::Fetch(server.data_port(), "POST", "/v2/models/digits/infer", body,
                                        {testing::Bearer(api_key)});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"model_version\":\"1\""), std::string::npos) << r.body;
  for (const char* copy : {"2", "6"}) {
    EXPECT_EQ(testing::Fetch(server.data_port(), "POST",
                             std::string("/v2/models/digits/versions/") + copy + "/infer", body,
                             {testing::Bearer(api_key)})
                  .status,
              503)  // known, not ready
        << copy;
  }
  const std::string models =
      testing::Fetch(server.admin_port(), "GET", "/admin/v1/models", "", {testing::Bearer(api_key)})
          .body;
  EXPECT_NE(models.find("signed as 'digits/1', but served as 'digits/2'"), std::string::npos)
      << models;
  EXPECT_EQ(server.Stop(), 0);

  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"model", "verify", (store / "digits" / "2").string(),
                                "--trusted-key", prefix + ".pub"},
                               &out, &err),
            1);
  EXPECT_NE(err.find("signed as 'digits/1', but served as 'digits/2'"), std::string::npos) << err;
  EXPECT_EQ(testing::RunPillar({"model", "verify", (store / "digits" / "1").string(),
                                "--trusted-key", prefix + ".pub"},
                               &out, &err),
            0)
      << err;
}

// The finding: anyone who could write the store could move an alias, or roll it back to an
// older signed file. Aliases move only signed, a generation above every one seen before; a file
// refused leaves the aliases in service as they were, and says why.
TEST(SignedAliasesTest, OnlyAKeyHolderMovesAnAliasAndAnOlderFileIsNotPutBack) {
  testing::ServerProcess server;
  const fs::path store = testing::CopyDemoStore(server.dir());
  fs::copy(store / "digits" / "1", store / "digits" / "2", fs::copy_options::recursive);
  server.SetStore(store);
  server.AddRepositoryConfig("poll_ms = 50\n");
  const std::string api_key = server.CreateKey("k");
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string config = server.config_path().string();
  const fs::path aliases = store / "digits" / "aliases.json";
  const std::string body = testing::InferBody({&testing::LoadHeldOut()[0]});
  auto version = [&] {
    testing::HttpReply r = testing::Fetch(server.data_port(), "POST", "/v2/models/digits/infer",
                                          body, {testing::Bearer(api_key)});
    const size_t at = r.body.find("\"model_version\":\"");
    return r.status == 200 && at != std::string::npos ? r.body.substr(at + 17, 1) : "none";
  };
  auto serves = [&](const std::string& v) {
    for (int i = 0; i < 200; ++i) {
      if (version() == v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto logged = [&](const std::string& text) {
    for (int i = 0; i < 200; ++i) {
      if (server.Log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto read = [](const fs::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  std::string out, err;
  ASSERT_EQ(testing::RunPillar({"model", "promote", "digits", "2", "-c", config}, &out, &err), 0)
      << err;
  const std::string generation_one = read(aliases);  // prod -> 2
  ASSERT_EQ(testing::RunPillar({"model", "promote", "digits", "1", "-c", config}, &out, &err), 0)
      << err;
  ASSERT_TRUE(serves("1")) << server.Log();  // prod, although 2 is the latest

  // An unsigned move, an older signed file put back, the file removed: none takes effect.
  std::ofstream(aliases)
      << R"({"model":"digits","generation":9,"aliases":{"prod":2},"history":[]})";
  EXPECT_TRUE(logged("aliases.json: not signed")) << server.Log();
  EXPECT_EQ(version(), "1");
  std::ofstream(aliases) << generation_one;
  EXPECT_TRUE(logged("generation 1 is older than generation 2 seen before")) << server.Log();
  EXPECT_EQ(version(), "1");
  fs::remove(aliases);
  EXPECT_TRUE(logged("the aliases file is gone")) << server.Log();
  EXPECT_EQ(version(), "1");

  // A restart remembers the generation (state store): the older file is still refused.
  std::ofstream(aliases) << generation_one;
  ASSERT_EQ(server.Stop(), 0);
  ASSERT_TRUE(server.Start()) << server.Log();
  EXPECT_TRUE(logged("generation 1 is older than generation 2 seen before")) << server.Log();
  EXPECT_EQ(testing::Fetch(server.data_port(), "POST", "/v2/models/digits/versions/prod/infer",
                           body, {testing::Bearer(api_key)})
                .status,
            404);

  // The key holder repairs it, knowingly, with a move signed above every generation seen.
  EXPECT_EQ(testing::RunPillar({"model", "promote", "digits", "1", "-c", config}, &out, &err), 1);
  EXPECT_NE(err.find("--replace-aliases"), std::string::npos) << err;
  ASSERT_EQ(testing::RunPillar(
                {"model", "promote", "digits", "1", "--replace-aliases", "-c", config}, &out, &err),
            0)
      << err;
  // The notice names the file in the store, never the descriptor path the CLI reaches it by.
  EXPECT_NE(err.find("replacing digits's aliases"), std::string::npos) << err;
  EXPECT_EQ(err.find("/proc/self/fd"), std::string::npos) << err;
  EXPECT_TRUE(serves("1"));
  ASSERT_EQ(testing::RunPillar({"model", "history", "digits", "-c", config}, &out, &err), 0);
  EXPECT_NE(out.find("generation 3, signed by key"), std::string::npos) << out;
  EXPECT_EQ(server.Stop(), 0);
}

}  // namespace
}  // namespace pillar
