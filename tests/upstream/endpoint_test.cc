#include "upstream/endpoint.h"

#include <gtest/gtest.h>

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
