// The TLS context a remote version presents to its upstreams: its client key is a secret file,
// and the key must be its certificate's.
#include "upstream/upstream_credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "testing/temp_dir.h"

namespace pillar::upstream {
namespace {

class UpstreamCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"client", "other"}) {
      const std::string command =
          "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
          "-subj /CN=gateway -keyout " +
          Path(std::string(name) + ".key") + " -out " + Path(std::string(name) + ".pem") +
          " >/dev/null 2>&1";
      ASSERT_EQ(std::system(command.c_str()), 0);
      ASSERT_EQ(::chmod(Path(std::string(name) + ".key").c_str(), 0600), 0);
    }
    remote_.client_certificate = Path("client.pem");
    remote_.client_key = Path("client.key");
  }

  std::string Path(const std::string& name) const { return (dir_.path() / name).string(); }

  testing::TempDir dir_;
  models::RemoteConfig remote_;
};

TEST_F(UpstreamCredentialsTest, AClientKeyAndItsCertificateMakeAContext) {
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> tls = MakeTlsContext(remote_);
  EXPECT_TRUE(tls.ok()) << tls.status();
}

// Found by review helper-59: a client key its group or others could read was used, where the
// listeners' keys and the credentials file are refused so.
TEST_F(UpstreamCredentialsTest, AClientKeyOthersCanReadIsRefused) {
  for (mode_t mode : {0644, 0640, 0604}) {
    ASSERT_EQ(::chmod(remote_.client_key.c_str(), mode), 0);
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> tls = MakeTlsContext(remote_);
    ASSERT_FALSE(tls.ok()) << std::oct << mode;
    EXPECT_NE(tls.status().message().find("client_key"), std::string::npos) << tls.status();
    EXPECT_NE(tls.status().message().find("readable by group or others"), std::string::npos)
        << tls.status();
  }
}

// Found by review helper-60: OpenSSL asked for the pass phrase on the terminal.
TEST_F(UpstreamCredentialsTest, AnEncryptedClientKeyIsRefusedSayingSo) {
  const std::string command = "openssl pkey -in " + Path("client.key") + " -aes256 -passout " +
                              "pass:secret -out " + Path("locked.key") + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  ASSERT_EQ(::chmod(Path("locked.key").c_str(), 0600), 0);
  remote_.client_key = Path("locked.key");
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> tls = MakeTlsContext(remote_);
  ASSERT_FALSE(tls.ok());
  EXPECT_NE(tls.status().message().find("is encrypted"), std::string::npos) << tls.status();
}

TEST_F(UpstreamCredentialsTest, AKeyThatIsNotTheCertificatesIsRefused) {
  remote_.client_key = Path("other.key");
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> tls = MakeTlsContext(remote_);
  ASSERT_FALSE(tls.ok());
  EXPECT_NE(tls.status().message().find("client_key"), std::string::npos) << tls.status();
}

// Found by review helper-93: an upstream that quotes half of the token it refuses, as
// OpenAI-style servers do, got that half to the client and the access log.
TEST(TokenRedactorTest, RunsOfTheTokenAnywhereAreTakenOut) {
  const std::string token = "sekrit-a85a7e3793850892c1d4e5f60718293a";
  const TokenRedactor redactor(token);
  EXPECT_EQ(redactor.Redact("bad token Bearer " + token + "."), "bad token Bearer [redacted].");
  EXPECT_EQ(redactor.Redact("Incorrect API key provided: " + token.substr(0, token.size() / 2) +
                            "*****" + token.substr(token.size() - 4)),
            "Incorrect API key provided: [redacted]*****293a");
  // A piece from the middle, two pieces side by side, the token twice.
  EXPECT_EQ(redactor.Redact("x" + token.substr(10, 9) + "y"), "x[redacted]y");
  EXPECT_EQ(redactor.Redact(token.substr(20, 10) + token.substr(0, 8)), "[redacted]");
  EXPECT_EQ(redactor.Redact(token + " " + token), "[redacted] [redacted]");
  // Seven bytes of it, or text that merely shares letters, stay.
  EXPECT_EQ(redactor.Redact("x" + token.substr(12, 7) + "y"), "x" + token.substr(12, 7) + "y");
  EXPECT_EQ(redactor.Redact("no secret here"), "no secret here");
  // A text cut short inside the token's start.
  EXPECT_EQ(redactor.Redact("quoted: " + token.substr(0, 5)), "quoted: [redacted]");
  EXPECT_EQ(redactor.Redact(""), "");
  // Found by review helper-94: the token in upper case went out whole.
  std::string upper = token;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(redactor.Redact("KEY " + upper + "!"), "KEY [redacted]!");
  EXPECT_EQ(redactor.Redact("key " + upper.substr(3, 12)), "key [redacted]");
}

TEST(TokenRedactorTest, AShortTokenGoesWhole) {
  const TokenRedactor redactor("abc123");
  EXPECT_EQ(redactor.Redact("k=abc123, k=abc123"), "k=[redacted], k=[redacted]");
  EXPECT_EQ(redactor.Redact("abc12 and bc123"), "abc12 and bc123");
  EXPECT_EQ(TokenRedactor("").Redact("text"), "text");
}

}  // namespace
}  // namespace pillar::upstream
