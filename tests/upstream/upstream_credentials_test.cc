// The TLS context a remote version presents to its upstreams: its client key is a secret file,
// and the key must be its certificate's.
#include "upstream/upstream_credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

}  // namespace
}  // namespace pillar::upstream
