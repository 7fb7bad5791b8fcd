#include "upstream/endpoint.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace pillar::upstream {
namespace {

TEST(EndpointTest, ReadsSchemeHostPortAndPath) {
  absl::StatusOr<Endpoint> e = ParseEndpoint("https://gpu-2.internal:8443/serving/");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->tls);
  EXPECT_EQ(e->host, "gpu-2.internal");
  EXPECT_EQ(e->port, 8443);
  EXPECT_EQ(e->base_path, "/serving");
  EXPECT_EQ(e->host_header, "gpu-2.internal:8443");
  EXPECT_EQ(e->url, "https://gpu-2.internal:8443/serving");

  e = ParseEndpoint("http://10.0.0.5");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->tls);
  EXPECT_EQ(e->port, 80);
  EXPECT_EQ(e->base_path, "");

  e = ParseEndpoint("http://[::1]:9000");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 9000);
  EXPECT_EQ(e->host_header, "[::1]:9000");
}

// An endpoint is known by its place: the URL in one spelling, which reloads of the backends file
// and instances sharing breakers match on.
TEST(EndpointTest, IsKnownByOneSpellingOfItsUrl) {
  absl::StatusOr<Endpoint> a = ParseEndpoint("http://GPU-2.Internal:08443/Serving/");
  absl::StatusOr<Endpoint> b = ParseEndpoint("http://gpu-2.internal:8443/Serving");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->place, "http://gpu-2.internal:8443/Serving");  // the path keeps its case
  EXPECT_EQ(a->place, b->place);
  EXPECT_NE(a->url, b->url);  // messages name it as configured
  EXPECT_NE(ParseEndpoint("http://gpu-2.internal:8443/serving")->place, b->place);
  EXPECT_EQ(ParseEndpoint("http://[::1]:09000")->place, "http://[::1]:9000");
}

TEST(EndpointTest, RefusesWhatIsNotAPlainBaseUrl) {
  for (const char* url :
       {"ftp://h", "h:80", "http://", "http://:80", "http://user:pw@h", "http://h?x=1",
        "http://h#f", "http://h:0", "http://h:65536", "http://h:8x", "http://h:", "http://[::1",
        "http://[::1]x", "http://h\r\nX: y", "http://h t", "http://h/a\r\nX: y", "http://h/a b"}) {
    EXPECT_FALSE(ParseEndpoint(url).ok()) << url;
  }
}

}  // namespace
}  // namespace pillar::upstream

namespace pillar::upstream {
namespace {

// Found in the notes on the remote backends: an endpoint named by a fully qualified name
// ("gpu-2.internal.") sent it with the dot as its TLS server name and asked the certificate for
// it, which no certificate names (OpenSSL matches none against it): the endpoint never
// connected, and the error said only that verification failed.
TEST(EndpointTest, ATlsNameIsTheHostWithoutTheDotOfAFullyQualifiedName) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  X509_set_pubkey(cert.get(), key.get());
  GENERAL_NAMES* names = GENERAL_NAMES_new();
  GENERAL_NAME* dns = GENERAL_NAME_new();
  ASN1_IA5STRING* text = ASN1_IA5STRING_new();
  ASN1_STRING_set(text, "gpu-2.internal", -1);
  GENERAL_NAME_set0_value(dns, GEN_DNS, text);
  sk_GENERAL_NAME_push(names, dns);
  ASSERT_EQ(X509_add1_ext_i2d(cert.get(), NID_subject_alt_name, names, 0, 0), 1);
  GENERAL_NAMES_free(names);
  const auto matches = [&](const std::string& name) {
    return X509_check_host(cert.get(), name.c_str(), name.size(),
                           X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, nullptr) == 1;
  };
  absl::StatusOr<Endpoint> qualified = ParseEndpoint("https://gpu-2.internal.:8443");
  ASSERT_TRUE(qualified.ok()) << qualified.status();
  EXPECT_EQ(qualified->host, "gpu-2.internal.");  // resolved as given
  EXPECT_EQ(TlsServerName(*qualified), "gpu-2.internal");
  EXPECT_TRUE(matches(TlsServerName(*qualified)));
  EXPECT_FALSE(matches(qualified->host));  // why the dot goes
  absl::StatusOr<Endpoint> plain = ParseEndpoint("https://gpu-2.internal:8443");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(TlsServerName(*plain), "gpu-2.internal");
}

}  // namespace
}  // namespace pillar::upstream
