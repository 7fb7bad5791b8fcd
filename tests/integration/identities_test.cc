// R-SEC-12 against the real binary: API keys through their lifecycle (expiry, rotation with an
// overlap, last-used times), JWT bearer tokens verified against a JWKS file that is reloaded
// when the identity provider rotates its keys, and client certificates on a mutual-TLS
// listener. Each method ends in a principal that the policy decides on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "common/strings.h"
#include "testing/http_client.h"
#include "testing/jwt_signer.h"
#include "testing/server_process.h"

namespace pillar {
namespace {

using testing::Bearer;
using testing::Fetch;

int Get(uint16_t port, const std::string& key, const std::string& path = "/v2/models/digits") {
  return Fetch(port, "GET", path, "", {Bearer(key)}).status;
}

std::string Shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

TEST(IdentitiesTest, KeysExpireRotateWithAnOverlapAndRecordTheirLastUse) {
  testing::ServerProcess server;
  server.AddConfig("");
  const std::string user = server.CreateKey("svc", {"--tenant", "demo", "--role", "user"});
  ASSERT_FALSE(user.empty());
  ASSERT_TRUE(server.Start()) << server.Log();
  EXPECT_EQ(Get(server.data_port(), user), 200);
  // Made once the server runs: its two seconds must not go by while a slow (sanitized) server
  // starts. The server sees it at its next key reload.
  const std::string short_lived =
      server.CreateKey("temp", {"--tenant", "demo", "--role", "user", "--expires-in", "2s"});
  ASSERT_FALSE(short_lived.empty());
  int fresh = 0;
  for (int i = 0; i < 100 && fresh != 200; ++i) {
    fresh = Get(server.data_port(), short_lived);
    if (fresh != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fresh, 200);

  // Rotate: the successor works at once, the old key until the overlap ends.
  std::string rotated;
  ASSERT_EQ(testing::RunPillar({"key", "rotate", "-c", server.config_path().string(),
                                user.substr(3, 12), "--overlap", "1s"},
                               &rotated),
            0);
  while (!rotated.empty() && rotated.back() == '\n') rotated.pop_back();
  int successor = 0;
  for (int i = 0; i < 100 && successor != 200; ++i) {
    successor = Get(server.data_port(), rotated);
    if (successor != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(successor, 200);
  EXPECT_EQ(Get(server.data_port(), user), 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto old = Fetch(server.data_port(), "GET", "/v2/models/digits", "", {Bearer(user)});
  EXPECT_EQ(old.status, 401);
  EXPECT_NE(old.body.find("API key expired"), std::string::npos) << old.body;
  EXPECT_EQ(Get(server.data_port(), short_lived), 401);
  EXPECT_EQ(Get(server.data_port(), rotated), 200);  // inherited tenant and roles

  // Last use is written back (key_touch_ms is 10 s by default; wait for the stop flush).
  EXPECT_EQ(server.Stop(), 0);
  std::string list;
  ASSERT_EQ(
      testing::RunPillar({"key", "list", "--json", "-c", server.config_path().string()}, &list), 0);
  EXPECT_NE(list.find("\"replaced_by\":\"" + rotated.substr(3, 12) + "\""), std::string::npos)
      << list;
  EXPECT_EQ(list.find("\"last_used\":null"), std::string::npos) << list;  // all three were used
}

TEST(IdentitiesTest, JwtBearerTokensFromAReloadedJwks) {
  testing::ServerProcess server;
  auto first = testing::JwtSigner::Make(testing::JwtSigner::kRs256, "2026-11");
  auto next = testing::JwtSigner::Make(testing::JwtSigner::kEs256, "2026-12");
  const std::string jwks = (server.dir() / "jwks.json").string();
  std::ofstream(jwks) << testing::JwksJson({&first});
  server.AddConfig("[jwt]\njwks = \"" + jwks +
                   "\"\nissuer = \"https://idp.test\"\naudiences = [\"pillar\"]\n"
                   "tenant_claim = \"org\"\nreload_ms = 50\n");
  ASSERT_TRUE(server.Start()) << server.Log();
  const int64_t now = std::time(nullptr);
  auto claims = [&](const std::string& org, int64_t exp) {
    return StrCat(R"({"iss":"https://idp.test","aud":"pillar","sub":"alice","org":")", org,
                  R"(","roles":["user"],"exp":)", exp, "}");
  };
  EXPECT_EQ(Get(server.data_port(), first.Sign(claims("demo", now + 60))), 200);
  EXPECT_EQ(Get(server.data_port(), first.Sign(claims("other", now + 60))), 404);  // not its tenant
  auto expired = Fetch(server.data_port(), "GET", "/v2/models/digits", "",
                       {Bearer(first.Sign(claims("demo", now - 600)))});
  EXPECT_EQ(expired.status, 401);
  EXPECT_NE(expired.body.find("invalid token: expired"), std::string::npos) << expired.body;
  // The IdP rotates to a new key: tokens signed with it work once the JWKS file changes.
  const std::string next_token = next.Sign(claims("demo", now + 60));
  EXPECT_EQ(Get(server.data_port(), next_token), 401);
  std::ofstream(jwks) << testing::JwksJson({&first, &next});
  int status = 0;
  for (int i = 0; i < 200 && status != 200; ++i) {
    status = Get(server.data_port(), next_token);
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
}

TEST(IdentitiesTest, ClientCertificatesOnAMutualTlsListener) {
  testing::ServerProcess server;
  const std::string d = server.dir().string();
  const std::string quiet = " >/dev/null 2>&1";
  ASSERT_EQ(std::system(("cd " + d +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca"
                         " -keyout ca.key -out ca.pem" +
                         quiet +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
                         " -keyout server.key -out server.pem" +
                         quiet +
                         " && openssl req -newkey rsa:2048 -nodes -subj /CN=batch-service"
                         " -keyout client.key -out client.csr" +
                         quiet +
                         " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key"
                         " -CAcreateserial -days 1 -out client.pem" +
                         quiet +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -days 1"
                         " -subj /CN=batch-service -keyout rogue.key -out rogue.pem" +
                         quiet +
                         " && openssl req -newkey rsa:2048 -nodes -subj /CN=key:0123456789ab"
                         " -keyout posing.key -out posing.csr" +
                         quiet +
                         " && openssl x509 -req -in posing.csr -CA ca.pem -CAkey ca.key"
                         " -CAcreateserial -days 1 -out posing.pem" +
                         quiet +
                         " && openssl req -newkey rsa:2048 -nodes"
                         " -subj /CN=batch-service/CN=nobody -keyout twice.key -out twice.csr" +
                         quiet +
                         " && openssl x509 -req -in twice.csr -CA ca.pem -CAkey ca.key"
                         " -CAcreateserial -days 1 -out twice.pem" +
                         quiet)
                            .c_str()),
            0);
  server.AddDataConfig("tls_certificate = \"" + d + "/server.pem\"\ntls_private_key = \"" + d +
                       "/server.key\"\nclient_ca = \"" + d +
                       "/ca.pem\"\nclient_certificates = \"optional\"\n");
  server.AddConfig(
      "[[mtls_client]]\nidentity = \"batch-service\"\ntenant = \"demo\"\nroles = [\"user\"]\n");
  const std::string key = server.CreateKey("k", {"--tenant", "demo", "--role", "user"});
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string url = "https://127.0.0.1:" + std::to_string(server.data_port());
  auto curl = [&](const std::string& args) {
    return Shell("curl -sk --max-time 10 -o /dev/null -w '%{http_code}' " + args + " " + url +
                 "/v2/models/digits");
  };
  EXPECT_EQ(curl("--cert " + d + "/client.pem --key " + d + "/client.key"), "200");
  EXPECT_EQ(curl(""), "401");                                        // no certificate, no key
  EXPECT_EQ(curl("-H 'Authorization: Bearer " + key + "'"), "200");  // keys still work
  // Same subject, not signed by the trusted CA: the handshake fails, nothing is served.
  EXPECT_EQ(curl("--cert " + d + "/rogue.pem --key " + d + "/rogue.key"), "000");
  // A trusted CA's certificate that no [[mtls_client]] lists, named like an API key's principal:
  // refused, and its refusal recorded as the certificate's, never as that key's (found by
  // review helper-59).
  EXPECT_EQ(curl("--cert " + d + "/posing.pem --key " + d + "/posing.key"), "401");
  std::string audit;
  for (int i = 0; i < 100 && audit.find("key:0123456789ab") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writer's batch delay
    std::ifstream in(server.audit_log());
    audit.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(audit.find(R"("principal":"mtls:key:0123456789ab")"), std::string::npos) << audit;
  EXPECT_EQ(audit.find(R"("principal":"key:0123456789ab")"), std::string::npos);
  // Two common names: the certificate names nobody, and the refusal says so (review helper-60:
  // it read "missing Authorization header").
  const std::string twice = Shell("curl -sk --max-time 10 --cert " + d + "/twice.pem --key " + d +
                                  "/twice.key " + url + "/v2/models/digits");
  EXPECT_NE(twice.find("names nobody"), std::string::npos) << twice;
}

TEST(IdentitiesTest, AClientCertificateNamedByItsUriSan) {
  testing::ServerProcess server;
  const std::string d = server.dir().string();
  const std::string quiet = " >/dev/null 2>&1";
  std::ofstream(d + "/san.ext") << "subjectAltName = URI:spiffe://acme.test/ns/batch/sa/scorer\n";
  ASSERT_EQ(std::system(("cd " + d +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca"
                         " -keyout ca.key -out ca.pem" +
                         quiet +
                         " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
                         " -keyout server.key -out server.pem" +
                         quiet +
                         " && openssl req -newkey rsa:2048 -nodes -subj /CN=not-the-identity"
                         " -keyout client.key -out client.csr" +
                         quiet +
                         " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key"
                         " -CAcreateserial -days 1 -extfile san.ext -out client.pem" +
                         quiet)
                            .c_str()),
            0);
  server.AddDataConfig(
      "tls_certificate = \"" + d + "/server.pem\"\ntls_private_key = \"" + d +
      "/server.key\"\nclient_ca = \"" + d +
      "/ca.pem\"\nclient_certificates = \"require\"\nclient_identity = \"san_uri\"\n");
  server.AddConfig(
      "[[mtls_client]]\nidentity = \"spiffe://acme.test/ns/batch/sa/scorer\"\n"
      "tenant = \"demo\"\nroles = [\"user\"]\n");
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string url = "https://127.0.0.1:" + std::to_string(server.data_port());
  auto curl = [&](const std::string& args) {
    return Shell("curl -sk --max-time 10 -o /dev/null -w '%{http_code}' " + args + " " + url +
                 "/v2/models/digits");
  };
  EXPECT_EQ(curl("--cert " + d + "/client.pem --key " + d + "/client.key"), "200");
  EXPECT_EQ(curl(""), "000");  // "require": no certificate, no connection
}

}  // namespace
}  // namespace pillar
