#include "upstream/reply_parser.h"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <string>
#include <string_view>

namespace pillar::upstream {
namespace {

namespace http = boost::beast::http;

struct Parsed {
  boost::system::error_code ec;
  bool done = false;
  size_t left = 0;  // bytes after the reply
};

// Feeds `wire` to `parser` `step` bytes at a time, as replies arrive, keeping what the parser
// did not take for the next call.
Parsed Feed(ReplyParser& parser, std::string_view wire, size_t step) {
  Parsed out;
  std::string pending;
  size_t at = 0;
  while (!parser.is_done() && (at < wire.size() || !pending.empty())) {
    const size_t n = std::min(step, wire.size() - at);
    pending.append(wire.substr(at, n));
    at += n;
    const size_t used = parser.put(boost::asio::buffer(pending), out.ec);
    if (out.ec == http::error::need_more) {
      out.ec = {};
      if (n == 0) break;  // nothing more to give
      pending.erase(0, used);
      continue;
    }
    if (out.ec) return out;
    pending.erase(0, used);
  }
  out.done = parser.is_done();
  out.left = pending.size() + (wire.size() - at);
  return out;
}

TEST(ReplyParserTest, ReadsStatusFieldsAndALengthDelimitedBodyInAnyPieces) {
  const std::string wire =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "retry-after: 7\r\nX-Pillar-Shed: deadline\r\nContent-Length: 11\r\n\r\n{\"error\":1}";
  for (size_t step : {size_t(1), size_t(3), size_t(17), wire.size()}) {
    ReplyParser parser;
    parser.body_limit(1024);
    Parsed p = Feed(parser, wire, step);
    ASSERT_FALSE(p.ec) << p.ec.message() << " at step " << step;
    ASSERT_TRUE(p.done) << step;
    EXPECT_EQ(parser.status(), 503);
    EXPECT_EQ(parser.retry_after_s(), 7);
    EXPECT_TRUE(parser.shed_for_deadline());
    EXPECT_EQ(parser.body(), "{\"error\":1}");
    EXPECT_TRUE(parser.keep_alive());
    EXPECT_EQ(p.left, 0u);
  }
}

TEST(ReplyParserTest, JoinsChunksAndLeavesWhatFollowsTheReply) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nTrailer: x\r\n\r\nHTTP/1.1 200 OK\r\n";
  ReplyParser parser;
  parser.body_limit(1024);
  Parsed p = Feed(parser, wire, wire.size());
  ASSERT_FALSE(p.ec) << p.ec.message();
  ASSERT_TRUE(p.done);
  EXPECT_EQ(parser.status(), 200);
  EXPECT_EQ(parser.body(), "abcdefg");
  EXPECT_FALSE(parser.keep_alive());
  EXPECT_FALSE(parser.retry_after_s().has_value());
  EXPECT_FALSE(parser.shed_for_deadline());
  EXPECT_EQ(p.left, std::string_view("HTTP/1.1 200 OK\r\n").size());
}

TEST(ReplyParserTest, HoldsTheBodyToItsLimitDeclaredOrChunked) {
  ReplyParser declared;
  declared.body_limit(10);
  EXPECT_EQ(Feed(declared, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", 64).ec,
            http::error::body_limit);
  ReplyParser chunked;
  chunked.body_limit(10);
  EXPECT_EQ(Feed(chunked,
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n"
                 "6\r\nghijkl\r\n0\r\n\r\n",
                 64)
                .ec,
            http::error::body_limit);
}

TEST(ReplyParserTest, ReadsOnlyTheSecondsFormOfRetryAfter) {
  EXPECT_EQ(RetryAfterSeconds("0"), 0);
  EXPECT_EQ(RetryAfterSeconds("120"), 120);
  EXPECT_EQ(RetryAfterSeconds("999999"), 3600);  // at most an hour
  // Digits past int64 are a long wait, not none (review helper-126).
  EXPECT_EQ(RetryAfterSeconds("99999999999999999999"), 3600);
  EXPECT_FALSE(RetryAfterSeconds("-1").has_value());
  EXPECT_FALSE(RetryAfterSeconds("12s").has_value());
  EXPECT_FALSE(RetryAfterSeconds("").has_value());
  EXPECT_FALSE(RetryAfterSeconds("Wed, 21 Oct 2026 07:28:00 GMT").has_value());
}

TEST(ReplyParserTest, AStatusBelow100IsRefused) {
  ReplyParser parser;
  parser.body_limit(1024);
  EXPECT_EQ(Feed(parser, "HTTP/1.1 000 OK\r\nContent-Length: 0\r\n\r\n", 64).ec,
            http::error::bad_status);
}

TEST(ReplyParserTest, AnHttp10ReplyIsNotKeptAlive) {
  ReplyParser parser;
  parser.body_limit(1024);
  Parsed p = Feed(parser, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 64);
  ASSERT_TRUE(p.done);
  EXPECT_EQ(parser.body(), "ok");
  EXPECT_FALSE(parser.keep_alive());
}

}  // namespace
}  // namespace pillar::upstream
