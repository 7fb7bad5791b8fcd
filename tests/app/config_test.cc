#include "app/config.h"

#include <gtest/gtest.h>

namespace pillar::app {
namespace {

TEST(ConfigTest, DefaultsAreSafe) {
  Config c = *ParseConfig("", "pillar.toml", "");
  EXPECT_EQ(c.data.address, "127.0.0.1");
  EXPECT_EQ(c.admin.address, "127.0.0.1");
  EXPECT_FALSE(c.data.allow_plaintext);
  EXPECT_TRUE(c.strict_readiness);
  EXPECT_EQ(c.version_policy, "latest");
}

TEST(ConfigTest, ReadsEverySectionAndResolvesRelativePaths) {
  absl::StatusOr<Config> c = ParseConfig(R"(
[server]
threads = 3
drain_timeout_ms = 100
strict_readiness = false
[data]
address = "0.0.0.0"
port = 9000
tls_certificate = "tls/cert.pem"
tls_private_key = "tls/key.pem"
[admin]
port = 9001
[limits]
body_limit_bytes = 1024
request_timeout_ms = 5
[repository]
path = "store"
version_policy = "all"
[repository.policies]
digits = "latest:2"
[state]
path = "/abs/state.db"
[logging]
access_log = "-"
[runtime]
torch_threads = 2
)",
                                         "p.toml", "/etc/pillar");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 3);
  EXPECT_EQ(c->data.port, 9000);
  EXPECT_EQ(c->data.tls_certificate, "/etc/pillar/tls/cert.pem");
  EXPECT_EQ(c->limits.body_limit_bytes, 1024u);
  EXPECT_EQ(c->limits.request_timeout, absl::Milliseconds(5));
  EXPECT_EQ(c->repository_path, "/etc/pillar/store");
  EXPECT_EQ(c->model_policies.at("digits"), "latest:2");
  EXPECT_EQ(c->state_path, "/abs/state.db");
  EXPECT_EQ(c->access_log, "-");
  EXPECT_EQ(c->torch_threads, 2);
}

TEST(ConfigTest, LimitsOnWhatUnauthenticatedClientsMayMakeTheServerHold) {
  Config defaults = *ParseConfig("", "pillar.toml", "");
  EXPECT_EQ(defaults.limits.header_fields_limit, 100u);
  EXPECT_EQ(defaults.limits.inflight_bytes_limit, size_t(1) << 30);

  absl::StatusOr<Config> c = ParseConfig(
      "[limits]\nheader_fields_limit = 40\nbody_limit_bytes = 1000\n"
      "inflight_bytes_limit = 100000\n",
      "p.toml", "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.header_fields_limit, 40u);
  EXPECT_EQ(c->limits.inflight_bytes_limit, 100000u);

  auto error = [](const std::string& text) {
    absl::StatusOr<Config> c = ParseConfig(text, "p.toml", "");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_NE(error("[limits]\nheader_fields_limit = 0\n")
                .find("header_fields_limit must be an integer in [1, 10000]"),
            std::string::npos);
  // A budget smaller than one request of the largest allowed size would refuse that request
  // forever.
  EXPECT_NE(error("[limits]\ninflight_bytes_limit = 1048576\n")
                .find("inflight_bytes_limit (1048576) must be at least header_limit_bytes + "
                      "body_limit_bytes (8404992)"),
            std::string::npos);
}

TEST(ConfigTest, SlowBodiesAreRefusedAfterAGraceUnlessTheMinimumRateIsZero) {
  Config defaults = *ParseConfig("", "pillar.toml", "");
  EXPECT_EQ(defaults.limits.body_min_bytes_per_second, 64u * 1024);
  EXPECT_EQ(defaults.limits.body_min_rate_grace, absl::Seconds(5));

  absl::StatusOr<Config> c = ParseConfig(
      "[limits]\nbody_min_bytes_per_second = 1000\nbody_min_rate_grace_ms = 2500\n", "p.toml", "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.body_min_bytes_per_second, 1000u);
  EXPECT_EQ(c->limits.body_min_rate_grace, absl::Milliseconds(2500));

  c = ParseConfig("[limits]\nbody_min_bytes_per_second = 0\n", "p.toml", "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.body_min_bytes_per_second, 0u);  // disabled

  auto error = [](const std::string& text) {
    absl::StatusOr<Config> c = ParseConfig(text, "p.toml", "");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_NE(error("[limits]\nbody_min_bytes_per_second = -1\n")
                .find("body_min_bytes_per_second must be an integer in [0,"),
            std::string::npos);
  EXPECT_NE(error("[limits]\nbody_min_rate_grace_ms = 0\n").find("body_min_rate_grace_ms must be"),
            std::string::npos);
}

TEST(ConfigTest, MistakesAreErrorsNotDefaults) {
  auto error = [](const std::string& text) {
    absl::StatusOr<Config> c = ParseConfig(text, "p.toml", "");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_NE(error("[dta]\n").find("unknown section 'dta'"), std::string::npos);
  EXPECT_NE(error("[data]\nprot = 1\n").find("unknown key 'prot' in [data]"), std::string::npos);
  EXPECT_NE(error("[data]\nport = \"80\"\n").find("port must be an integer"), std::string::npos);
  EXPECT_NE(error("[data]\nport = 70000\n").find("port must be"), std::string::npos);
  EXPECT_NE(error("[server]\nthreads = -1\n").find("threads must be"), std::string::npos);
  EXPECT_NE(error("[data]\ntls_certificate = \"c.pem\"\n").find("needs both"), std::string::npos);
  EXPECT_NE(error("[repository]\nversion_policy = \"newest\"\n").find("version policy"),
            std::string::npos);
  EXPECT_NE(error("[repository.policies]\nx = 3\n").find("must be a string"), std::string::npos);
  EXPECT_NE(
      error("[limits]\nbody_limit_bytes = 0\n").find("body_limit_bytes must be an integer in [1,"),
      std::string::npos);
  EXPECT_NE(error("[server]\nthreads = 100000\n").find("threads must be an integer in [0, 256]"),
            std::string::npos);
  EXPECT_NE(error("[state]\nkey_refresh_ms = 0\n").find("key_refresh_ms must be"),
            std::string::npos);
  EXPECT_NE(error("[limits]\nrequest_timeout_ms = 0\n").find("request_timeout_ms must be"),
            std::string::npos);
  EXPECT_NE(error("[server]\nstrict_readiness = 1\n").find("strict_readiness must be a boolean"),
            std::string::npos);
  EXPECT_NE(error("data = 1\n").find("unknown section"), std::string::npos);
  EXPECT_NE(error("[data\n").find("p.toml:1"), std::string::npos);
}

}  // namespace
}  // namespace pillar::app
