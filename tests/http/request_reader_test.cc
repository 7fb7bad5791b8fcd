// What a session reads of a request's header fields in one pass each (request_reader.h): the
// framing checks (singleton headers, Transfer-Encoding) and the X-Pillar-* and Prefer headers.
#include "http/request_reader.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <string>

namespace pillar::http::internal {
namespace {

bhttp::request<bhttp::string_body> Parse(const std::string& head) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.eager(true);
  beast::error_code ec;
  parser.put(boost::asio::buffer(head), ec);
  EXPECT_FALSE(ec && ec != bhttp::error::need_more) << ec.message() << " in " << head;
  return parser.release();
}

std::string Framing(const std::string& head) {
  const std::optional<FramingError> error = CheckFraming(Parse(head).base());
  return error ? error->message : "ok";
}

TEST(RequestReaderTest, ASingletonHeaderSentTwiceInAnyCaseIsRefused) {
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), "ok");
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"), "duplicate header 'Host'");
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: x\r\nX-Other: 1\r\n"
                    "AUTHORIZATION: y\r\n\r\n"),
            "duplicate header 'Authorization'");
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nHost: a\r\nContent-Type: a\r\ncontent-type: b\r\n\r\n"),
            "duplicate header 'Content-Type'");
  // Headers that may repeat are not singletons.
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nHost: a\r\nAccept: a\r\nAccept: b\r\n\r\n"), "ok");
}

// Found by review helper-125: an HTTP/1.1 request without Host was answered (RFC 9112 3.2: 400).
TEST(RequestReaderTest, AnHttp11RequestWithoutHostIsRefused) {
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nAccept: a\r\n\r\n"),
            "an HTTP/1.1 request without a Host header");
  EXPECT_EQ(Framing("GET / HTTP/1.1\r\nhOsT: a\r\n\r\n"), "ok");
  EXPECT_EQ(Framing("GET / HTTP/1.0\r\n\r\n"), "ok");  // HTTP/1.0 had no Host
}

TEST(RequestReaderTest, OnlyChunkedFramesABodyAndNotInHttp10) {
  EXPECT_EQ(Framing("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  Chunked \r\n\r\n"), "ok");
  EXPECT_EQ(Framing("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            "unsupported Transfer-Encoding: pillar accepts only chunked");
  EXPECT_EQ(Framing("POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "Transfer-Encoding in an HTTP/1.0 request");
}

TEST(RequestReaderTest, PillarsHeadersAreReadInAnyCaseTheFirstCopyCounting) {
  Request request;
  ReadPillarHeaders(Parse("GET / HTTP/1.1\r\nHost: a\r\nx-pillar-timeout-ms: 250\r\n"
                          "X-Pillar-Timeout-Ms: 9\r\nX-PILLAR-PRIORITY: low-and-then-some-more\r\n"
                          "Prefer: wait=5\r\nprefer: respond-async\r\n\r\n"),
                    request);
  EXPECT_EQ(request.timeout_ms, 250);
  EXPECT_EQ(request.priority, "low-and-then-som");  // cut to 16 bytes
  EXPECT_TRUE(request.respond_async);
  Request none;
  ReadPillarHeaders(Parse("GET / HTTP/1.1\r\nHost: a\r\nX-Pillar-Timeout-Ms: 0\r\n"
                          "X-Pillar-Timeout-Ms: 100\r\n\r\n"),
                    none);
  EXPECT_EQ(none.timeout_ms, 0);  // out of range, and the first copy is the one read
  EXPECT_EQ(none.priority, "");
  EXPECT_FALSE(none.respond_async);
}

}  // namespace
}  // namespace pillar::http::internal
