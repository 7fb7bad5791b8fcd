#include "models/backends_file.h"

#include <gtest/gtest.h>

namespace pillar::models {
namespace {

RemoteConfig Signed() {
  RemoteConfig remote;
  remote.endpoints.push_back({"http://10.0.0.1:8000", 1, 1, "", ""});
  remote.credentials_file = "/etc/pillar/upstream.token";
  remote.model = "digits-upstream";
  remote.timeout_ms = 5000;
  return remote;
}

TEST(BackendsFileTest, ATableChangesOnlyWhatItNamesOfItsModel) {
  absl::StatusOr<BackendsFile> file = BackendsFile::Parse(R"([backends.digits]
endpoints = ["http://10.0.0.7:8000", { url = "http://10.0.0.8:8000", weight = 3, zone = "b" }]
attempt_timeout_ms = 150
[backends.digits.breaker]
failure_count = 4
)",
                                                          "backends.toml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->Names("digits"));
  absl::StatusOr<RemoteConfig> digits = file->Apply("digits", Signed());
  ASSERT_TRUE(digits.ok()) << digits.status();
  ASSERT_EQ(digits->endpoints.size(), 2u);  // replaced, not appended
  EXPECT_EQ(digits->endpoints[1].weight, 3);
  EXPECT_EQ(digits->attempt_timeout_ms, 150);
  EXPECT_EQ(digits->breaker.failure_count, 4);
  EXPECT_EQ(digits->timeout_ms, 5000);  // not named: as signed
  EXPECT_EQ(digits->credentials_file, "/etc/pillar/upstream.token");
  EXPECT_EQ(digits->model, "digits-upstream");
  // A model it does not name is served as signed.
  absl::StatusOr<RemoteConfig> other = file->Apply("other", Signed());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->endpoints[0].url, "http://10.0.0.1:8000");
}

TEST(BackendsFileTest, WhatStaysWithTheSignatureCannotBeSetHere) {
  for (const char* key :
       {"credentials_file = \"/tmp/x\"", "ca_file = \"/tmp/ca\"", "model = \"other\"",
        "version = \"2\"", "idempotent = false", "client_key = \"/tmp/k\""}) {
    absl::StatusOr<BackendsFile> file =
        BackendsFile::Parse(std::string("[backends.digits]\n") + key + "\n", "backends.toml");
    ASSERT_FALSE(file.ok()) << key;
    EXPECT_NE(file.status().message().find("backends.toml:2"), std::string::npos) << file.status();
  }
}

// Found by review helper-93: an endpoint's own model name in this file sent a signed language
// model's calls, with its credentials, to another upstream model.
TEST(BackendsFileTest, AnEndpointsModelStaysWithTheSignature) {
  absl::StatusOr<BackendsFile> refused = BackendsFile::Parse(
      "[backends.digits]\nendpoints = [{ url = \"http://10.0.0.7:8000\", model = \"other\" }]\n",
      "backends.toml");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("backends.toml:2"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("stays with the signature"), std::string::npos)
      << refused.status();
  // An endpoint the signature lists by the same URL keeps the name the signature gives it there;
  // a new one gets [remote] model's.
  RemoteConfig signed_remote = Signed();
  signed_remote.endpoints[0].model = "digits-on-a";
  absl::StatusOr<BackendsFile> file = BackendsFile::Parse(
      "[backends.digits]\nendpoints = [\"http://10.0.0.9:8000\", { url = \"http://10.0.0.1:8000\", "
      "weight = 2 }]\n",
      "backends.toml");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<RemoteConfig> digits = file->Apply("digits", signed_remote);
  ASSERT_TRUE(digits.ok()) << digits.status();
  ASSERT_EQ(digits->endpoints.size(), 2u);
  EXPECT_EQ(digits->endpoints[0].model, "");
  EXPECT_EQ(digits->endpoints[1].model, "digits-on-a");
  EXPECT_EQ(digits->endpoints[1].weight, 2);
  // Found by review helper-94: another spelling of the same URL lost the signed name.
  for (const char* spelling :
       {"http://10.0.0.1:8000/", "http://10.0.0.1:08000", "http://10.0.0.1:8000//"}) {
    absl::StatusOr<BackendsFile> respelled = BackendsFile::Parse(
        std::string("[backends.digits]\nendpoints = [\"") + spelling + "\"]\n", "backends.toml");
    ASSERT_TRUE(respelled.ok()) << spelling << ": " << respelled.status();
    absl::StatusOr<RemoteConfig> kept = respelled->Apply("digits", signed_remote);
    ASSERT_TRUE(kept.ok()) << spelling << ": " << kept.status();
    EXPECT_EQ(kept->endpoints[0].model, "digits-on-a") << spelling;
  }
}

TEST(BackendsFileTest, AFileThatDoesNotHoldIsRefusedWhole) {
  const std::pair<std::string, std::string> bad[] = {
      {"[server]\nthreads = 2\n", "only [backends.<model>] tables"},
      {"[backends.\"../x\"]\nendpoints = [\"http://a:1\"]\n", "does not name a model"},
      {"[backends.digits]\nendpoints = []\n", "endpoints must list 1 to 64"},
      {"[backends.digits]\nendpoints = [\"ftp://a\"]\n", "must start with http"},
      {"[backends.digits]\nendpoints = [\"http://a:1\", \"http://a:1\"]\n", "listed twice"},
      {"[backends.digits]\nendpoints = [\"http://a:1\", \"http://A:1/\"]\n", "listed twice"},
      {"[backends.digits]\nretries = 3\n", "backends.toml:2"},
      {"[backends.digits\n", "backends.toml:1"},
  };
  for (const auto& [text, error] : bad) {
    absl::StatusOr<BackendsFile> file = BackendsFile::Parse(text, "backends.toml");
    ASSERT_FALSE(file.ok()) << text;
    EXPECT_NE(file.status().message().find(error), std::string::npos) << file.status();
  }
}

// Found by review helper-45: a refused endpoint's password reached the log and, as a version's
// "not ready" reason, an admin's client.
TEST(BackendsFileTest, ARefusedEndpointIsShownWithoutItsCredentialsOrQuery) {
  const std::pair<std::string, std::string> bad[] = {
      {"http://admin:S3cretPassw0rd@127.0.0.1:9/v2",
       "'http://(credentials)@127.0.0.1:9/v2' carries credentials"},
      {"https://h:1/x?api-key=S3cretPassw0rd", "'https://h:1/x?(query)' has a query"},
      {"http://u:S3cretPassw0rd@h:1/?k=S3cretPassw0rd#f", "'http://(credentials)@h:1/?(query)'"},
      // Found by review helper-126: credentials holding '/' (base64), or '?', or longer than the
      // 200 bytes a message shows, were shown; control bytes went to stderr as they came.
      {"http://svc:AbC/dEf+S3cret/Passw0rd==@127.0.0.1:19010",
       "'http://(credentials)@127.0.0.1:19010' carries credentials"},
      {"http://svc:S3cret?Passw0rd@h:1", "'http://(credentials)@h:1' carries credentials"},
      {"alice:S3cretPassw0rd@gpu:8000/https://x", "'(credentials)@gpu:8000/https://x' must start"},
      {"https://bearer:" + std::string(300, 'x') + "S3cretPassw0rd@h:1/v2",
       "'https://(credentials)@h:1/v2' carries credentials"},
      {"http://h/a b\\r\\nX-Evil: 1", "'http://h/a b\\x0d\\x0aX-Evil: 1' has a blank or control"},
  };
  for (const auto& [url, error] : bad) {
    absl::StatusOr<BackendsFile> file =
        BackendsFile::Parse("[backends.digits]\nendpoints = [\"" + url + "\"]\n", "b.toml");
    ASSERT_FALSE(file.ok()) << url;
    EXPECT_NE(file.status().message().find(error), std::string::npos) << file.status();
    EXPECT_EQ(file.status().message().find("S3cret"), std::string::npos) << file.status();
  }
}

// What is found wrong after the reading (an endpoint's URL, one listed twice, a status range,
// a health check's path, a hedge over a model that is not idempotent) names the line to edit:
// the refusals said the file alone.
TEST(BackendsFileTest, ErrorsFoundAfterTheReadingNameTheirLine) {
  const std::pair<std::string, std::string> bad[] = {
      {"[backends.digits]\n\nendpoints = [\n  \"http://a:1\",\n  \"ftp://b:2\",\n]\n",
       "b.toml:5: [remote] endpoint 'ftp://b:2' must start with http:// or https://"},
      {"[backends.digits]\nendpoints = [\n  \"http://a:1\",\n  { url = \"http://A:1/\" },\n]\n",
       "b.toml:4: [remote] endpoint 'http://A:1/' is listed twice"},
      {"[backends.digits]\nendpoints = [\"http://a:1\", 7]\n",
       "b.toml:2: [remote] each endpoint is a URL or a table"},
      {"[backends.digits]\nendpoints = []\n", "b.toml:2: [remote] endpoints must list 1 to"},
      {"[backends.digits.breaker]\nfailure_count = 1\n\nstatus_codes = [\"600-700\"]\n",
       "b.toml:4: [remote.breaker] status_codes: '600-700' is not a status"},
      {"[backends.digits.breaker]\nfailure_count = 1\nerror_reasons = [\"dns\"]\n",
       "b.toml:3: [remote.breaker] error_reasons: 'dns'"},
      {"[backends.digits.health_check]\ninterval_ms = 500\npath = \"ready\"\n",
       "b.toml:3: [remote.health_check] path must start with '/'"},
  };
  for (const auto& [text, error] : bad) {
    absl::StatusOr<BackendsFile> file = BackendsFile::Parse(text, "b.toml");
    ASSERT_FALSE(file.ok()) << text;
    EXPECT_NE(file.status().message().find(error), std::string::npos) << file.status();
  }
  // Over a signed model that is not idempotent, a hedge is refused at its table's line.
  absl::StatusOr<BackendsFile> file = BackendsFile::Parse(
      "[backends.digits]\ntimeout_ms = 900\n[backends.digits.hedge]\nenabled = true\n", "b.toml");
  ASSERT_TRUE(file.ok()) << file.status();
  RemoteConfig once = Signed();
  once.idempotent = false;
  absl::StatusOr<RemoteConfig> applied = file->Apply("digits", once);
  ASSERT_FALSE(applied.ok());
  EXPECT_NE(applied.status().message().find("b.toml:3: [remote.hedge] needs an idempotent model"),
            std::string::npos)
      << applied.status();
}

}  // namespace
}  // namespace pillar::models
