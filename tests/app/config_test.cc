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
  EXPECT_EQ(c.repository.version_policy.ToString(), "latest:1");
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
  EXPECT_EQ(c->repository.path, "/etc/pillar/store");
  EXPECT_EQ(c->repository.model_policies.at("digits").ToString(), "latest:2");
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
  // A CA to check clients by, with no client asked for a certificate: no mutual TLS at all
  // (found by review helper-59: the server started so).
  EXPECT_NE(error("[data]\nclient_ca = \"ca.pem\"\n").find("client_certificates"),
            std::string::npos);
  // CRLs are checked against the CAs of client_ca: without one, they would check nothing.
  EXPECT_NE(error("[admin]\nclient_crl = \"ca.crl\"\n").find("client_crl without client_ca"),
            std::string::npos);
  // Listeners that trust different CAs (or name clients by different fields): each client must
  // say where its name counts, and only where certificates are asked for (review helper-59).
  const std::string two_cas =
      "[data]\nclient_ca = \"tenants.pem\"\nclient_certificates = \"optional\"\n"
      "[admin]\nclient_ca = \"ops.pem\"\nclient_certificates = \"require\"\n";
  EXPECT_NE(error(two_cas + "[[mtls_client]]\nidentity = \"ops-admin\"\nroles = [\"admin\"]\n")
                .find("must say which listeners"),
            std::string::npos);
  EXPECT_TRUE(ParseConfig(two_cas + "[[mtls_client]]\nidentity = \"ops-admin\"\n"
                                    "listeners = [\"admin\"]\n",
                          "p.toml", "")
                  .ok());
  // The same CA, revoked certificates on one listener only: as ambiguous (review helper-61).
  const std::string one_crl =
      "[data]\nclient_ca = \"ca.pem\"\nclient_certificates = \"optional\"\n"
      "client_crl = \"ca.crl\"\n"
      "[admin]\nclient_ca = \"ca.pem\"\nclient_certificates = \"require\"\n";
  EXPECT_NE(error(one_crl + "[[mtls_client]]\nidentity = \"ops-admin\"\nroles = [\"admin\"]\n")
                .find("revocation lists"),
            std::string::npos);
  // Nor for both listeners by name (review helper-62); for one of them, it is what it says.
  EXPECT_NE(error(one_crl + "[[mtls_client]]\nidentity = \"ops-admin\"\n"
                            "listeners = [\"data\", \"admin\"]\n")
                .find("is for both listeners"),
            std::string::npos);
  EXPECT_TRUE(ParseConfig(one_crl + "[[mtls_client]]\nidentity = \"ops-admin\"\n"
                                    "listeners = [\"admin\"]\n",
                          "p.toml", "")
                  .ok());
  // One CA by two paths (review helper-63: a symlink or a copy of the bundle passed as another
  // CA): two lists still refuse a client of both.
  const std::string one_ca_two_paths =
      "[data]\nclient_ca = \"ca.pem\"\nclient_certificates = \"optional\"\n"
      "client_crl = \"ca.crl\"\n"
      "[admin]\nclient_ca = \"./ca.pem\"\nclient_certificates = \"require\"\n";
  EXPECT_NE(error(one_ca_two_paths + "[[mtls_client]]\nidentity = \"ops-admin\"\n"
                                     "listeners = [\"data\", \"admin\"]\n")
                .find("is for both listeners"),
            std::string::npos);
  EXPECT_NE(error("[[mtls_client]]\nidentity = \"x\"\nlisteners = [\"data\"]\n")
                .find("asks for no client certificate"),
            std::string::npos);
  EXPECT_NE(error("[[mtls_client]]\nidentity = \"x\"\nlisteners = [\"metrics\"]\n")
                .find("the listeners are"),
            std::string::npos);
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

TEST(ConfigTest, EachPartReadsItsSectionIntoTypedOptions) {
  absl::StatusOr<Config> c = ParseConfig(R"(
[audit]
backend = "off"
fsync = "batch"
on_full = "refuse"
[limiter]
backend = "redis"
on_redis_failure = "open"
instances = 3
[jwt]
jwks = "keys.json"
issuer = "https://idp"
audiences = ["pillar"]
reload_ms = 0
[data]
client_ca = "ca.pem"
client_certificates = "require"
client_identity = "san_uri"
client_crl = "ca.crl"
tls_reload_ms = 250
)",
                                         "p.toml", "/etc/pillar");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->audit.backend, audit::AuditConfig::Backend::kOff);
  EXPECT_EQ(c->audit.fsync, audit::AuditConfig::Fsync::kBatch);
  EXPECT_EQ(c->audit.on_full, audit::AuditConfig::OnFull::kRefuse);
  EXPECT_EQ(c->limiter.backend, limits::LimiterConfig::Backend::kRedis);
  EXPECT_EQ(c->limiter.on_redis_failure, limits::LimiterConfig::OnRedisFailure::kOpen);
  EXPECT_EQ(c->limiter.instances, 3);
  ASSERT_TRUE(c->jwt.has_value());
  EXPECT_EQ(c->jwt->jwks_path, "/etc/pillar/keys.json");
  EXPECT_EQ(c->jwt->reload_interval, absl::ZeroDuration());
  EXPECT_EQ(c->data.client_ca, "/etc/pillar/ca.pem");
  EXPECT_EQ(c->data.client_crl, "/etc/pillar/ca.crl");
  EXPECT_EQ(c->data.client_certificates, http::ListenerOptions::ClientCertificates::kRequire);
  EXPECT_EQ(c->data.client_identity, http::ListenerOptions::ClientIdentity::kSanUri);
  EXPECT_EQ(c->data.tls_reload, absl::Milliseconds(250));
  EXPECT_EQ(c->admin.tls_reload, absl::Seconds(1));
  // Defaults: no [jwt] means no tokens; the file audit log, synced at intervals.
  Config defaults = *ParseConfig("", "p.toml", "");
  EXPECT_FALSE(defaults.jwt.has_value());
  EXPECT_EQ(defaults.audit.backend, audit::AuditConfig::Backend::kFile);
  EXPECT_EQ(defaults.audit.fsync, audit::AuditConfig::Fsync::kInterval);
}

TEST(ConfigTest, AChoiceOutsideItsListNamesTheFileTableKeyAndChoices) {
  auto error = [](const std::string& text) {
    absl::StatusOr<Config> c = ParseConfig(text, "p.toml", "");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_EQ(error("[audit]\nbackend = \"pg\"\n"),
            "p.toml:2:11: [audit] backend must be \"file\", \"postgres\" or \"off\"");
  EXPECT_EQ(error("[limiter]\non_redis_failure = 1\n"),
            "p.toml:2:20: [limiter] on_redis_failure must be \"closed\" or \"open\"");
  EXPECT_EQ(error("[admin]\nclient_identity = \"cn\"\n"),
            "p.toml:2:19: [admin] client_identity must be \"subject_cn\", \"san_uri\" or "
            "\"san_dns\"");
  EXPECT_EQ(error("[repository]\nversion_policy = \"newest\"\n")
                .find("p.toml: [repository] "
                      "version_policy: "),
            0u);
  EXPECT_NE(error("[audit]\nbackend = \"postgres\"\n").find("needs a postgres connection"),
            std::string::npos);
  EXPECT_NE(error("[jwt]\njwks = \"k.json\"\n").find("[jwt] needs issuer and audiences"),
            std::string::npos);
  EXPECT_NE(error("[[mtls_client]]\ntenant = \"t\"\n").find("[[mtls_client]] needs identity"),
            std::string::npos);
}

}  // namespace
}  // namespace pillar::app
