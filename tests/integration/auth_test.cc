// R-SEC-12: every route except liveness and readiness refuses a missing, malformed, unknown or
// revoked key with 401, on both listeners. The routes are enumerated from the real routers, so a
// route added later is covered without editing this test.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "app/routes.h"
#include "testing/http_client.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

std::string Instantiate(std::string pattern) {
  for (auto [name, value] : {std::pair{"{model}", "digits"}, std::pair{"{version}", "1"}}) {
    size_t at = pattern.find(name);
    if (at != std::string::npos) pattern.replace(at, std::string(name).size(), value);
  }
  return pattern;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess;
    valid_ = server_->CreateKey("valid");
    revoked_ = server_->CreateKey("revoked");
    ASSERT_FALSE(valid_.empty());
    ASSERT_TRUE(server_->RevokeKey(revoked_));
    ASSERT_TRUE(server_->Start()) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0);
    delete server_;
  }

  static testing::ServerProcess* server_;
  static std::string valid_;
  static std::string revoked_;
};

testing::ServerProcess* AuthTest::server_ = nullptr;
std::string AuthTest::valid_;
std::string AuthTest::revoked_;

TEST_F(AuthTest, EveryRouteRejectsBadCredentialsWith401) {
  // An unknown key with a valid shape: same id and length as a real one, other secret.
  std::string unknown = valid_.substr(0, 16) + std::string(valid_.size() - 16, 'A');
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {"missing", {}},
      {"not bearer", {"Authorization: Basic dXNlcjpwYXNz"}},
      {"malformed", {"Authorization: Bearer not-a-key"}},
      {"empty bearer", {"Authorization: Bearer "}},
      {"unknown", {Bearer(unknown)}},
      {"revoked", {Bearer(revoked_)}},
  };
  int checked_routes = 0;
  for (auto [router, port] : {std::pair{app::DataRouter(), server_->data_port()},
                              std::pair{app::AdminRouter(), server_->admin_port()}}) {
    for (const http::Route& route : router.routes()) {
      std::string path = Instantiate(route.pattern);
      if (route.anonymous) {
        EXPECT_TRUE(route.name == "live" || route.name == "ready")
            << route.name << " must not be anonymous";
        EXPECT_EQ(Fetch(port, route.method, path).status, 200) << path;
        continue;
      }
      ++checked_routes;
      for (const auto& [what, headers] : bad) {
        HttpReply r = Fetch(port, route.method, path, route.method == "POST" ? "{}" : "", headers);
        EXPECT_EQ(r.status, 401) << route.method << " " << path << " with " << what << " key";
        EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
        EXPECT_EQ(r.Header("www-authenticate"), "Bearer realm=\"pillar\"");
      }
      HttpReply ok =
          Fetch(port, route.method, path, route.method == "POST" ? "{}" : "", {Bearer(valid_)});
      EXPECT_NE(ok.status, 401) << route.method << " " << path
                                << " refused a valid key: " << ok.body;
    }
  }
  EXPECT_EQ(checked_routes, 15);  // 12 data-plane routes and 3 admin routes need a key
}

TEST_F(AuthTest, MessagesNameTheProblem) {
  uint16_t port = server_->data_port();
  EXPECT_NE(Fetch(port, "GET", "/v2").body.find("missing Authorization header"), std::string::npos);
  EXPECT_NE(
      Fetch(port, "GET", "/v2", "", {"Authorization: Bearer x"}).body.find("malformed API key"),
      std::string::npos);
  EXPECT_NE(Fetch(port, "GET", "/v2", "", {Bearer(revoked_)}).body.find("API key revoked"),
            std::string::npos);
  // Every refusal reached the audit sink, which counts it.
  const std::string metrics =
      Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(valid_)}).body;
  const std::string series =
      "pillar_security_decisions_total{kind=\"authentication\",decision=\"deny\"} ";
  const size_t at = metrics.find(series);
  ASSERT_NE(at, std::string::npos) << metrics.substr(0, 2000);
  EXPECT_GE(std::stoi(metrics.substr(at + series.size())), 3);
}

TEST_F(AuthTest, SchemeIsCaseInsensitive) {
  EXPECT_EQ(
      Fetch(server_->data_port(), "GET", "/v2", "", {"Authorization: bearer " + valid_}).status,
      200);
}

TEST_F(AuthTest, KeysCreatedOrRevokedWhileRunningTakeEffect) {
  std::string late = server_->CreateKey("late");
  auto status_with = [&](const std::string& key) {
    return Fetch(server_->data_port(), "GET", "/v2", "", {Bearer(key)}).status;
  };
  auto poll_until = [&](const std::string& key, int want) {
    for (int i = 0; i < 500 && status_with(key) != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_with(key);
  };
  EXPECT_EQ(poll_until(late, 200), 200);
  ASSERT_TRUE(server_->RevokeKey(late));
  EXPECT_EQ(poll_until(late, 401), 401);
}

TEST(KeyCommandTest, ListShowsIdsAndNamesNeverSecrets) {
  testing::ServerProcess server;
  std::string key = server.CreateKey("listed key");
  ASSERT_FALSE(key.empty());
  std::string out;
  ASSERT_EQ(
      testing::RunPillar({"key", "list", "--json", "-c", server.config_path().string()}, &out), 0);
  EXPECT_NE(out.find("\"id\":\"" + key.substr(3, 12) + "\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"name\":\"listed key\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"revoked\":null"), std::string::npos) << out;
  EXPECT_EQ(out.find(key.substr(16)), std::string::npos) << "key list printed a secret";
  std::string err;
  EXPECT_EQ(
      testing::RunPillar({"key", "revoke", "-c", server.config_path().string(), "000000000000"},
                         nullptr, &err),
      1);
  EXPECT_NE(err.find("no key with id 000000000000"), std::string::npos) << err;
  EXPECT_EQ(
      testing::RunPillar({"key", "create", "-c", server.config_path().string(), "--name", ""}), 1);
}

TEST(KeyStoreFileTest, StateFileIsPrivateAndHoldsNoSecret) {
  testing::ServerProcess server;
  std::string key = server.CreateKey("secret-check");
  ASSERT_FALSE(key.empty());
  auto perms = std::filesystem::status(server.dir() / "state.db").permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
  std::string bytes;  // the database and its write-ahead log
  for (const auto& entry : std::filesystem::directory_iterator(server.dir())) {
    if (entry.path().filename().string().rfind("state.db", 0) != 0) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_FALSE(bytes.empty());
  std::string secret = key.substr(16);
  EXPECT_EQ(bytes.find(secret), std::string::npos) << "the key's secret is stored in clear";
}

}  // namespace
}  // namespace pillar
