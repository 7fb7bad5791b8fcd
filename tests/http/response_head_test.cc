// The response head a session writes (response_head.h), byte for byte: the framing headers for
// each way a body ends, and no header value able to end the head or add a header.
#include "http/response_head.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar::http::internal {
namespace {

Response Json(int status, std::string body) {
  Response response;
  response.status = status;
  response.content_type = "application/json";
  response.body = std::move(body);
  return response;
}

std::string Head(const Response& response, ResponseFraming framing) {
  std::string head = "kept:";  // appended to, not replaced
  AppendResponseHead(response, framing, head);
  return head;
}

TEST(ResponseHeadTest, ASizedBodyIsFramedByItsLength) {
  Response response = Json(200, "{}");
  response.headers.emplace_back("X-Request-Id", "abc");
  EXPECT_EQ(Head(response, {}),
            "kept:HTTP/1.1 200 OK\r\nServer: pillar\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\nX-Request-Id: abc\r\n\r\n");
  EXPECT_EQ(Head(Json(404, ""), {.keep_alive = false}),
            "kept:HTTP/1.1 404 Not Found\r\nServer: pillar\r\nContent-Type: application/json\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Head(Json(200, "x"), {.http10 = true}),
            "kept:HTTP/1.1 200 OK\r\nServer: pillar\r\nContent-Type: application/json\r\n"
            "Content-Length: 1\r\nConnection: keep-alive\r\n\r\n");
}

TEST(ResponseHeadTest, AStreamIsChunkedOrEndsWithTheConnection) {
  Response events = Json(200, "");
  events.content_type = "text/event-stream";
  EXPECT_EQ(Head(events, {.streamed = true}),
            "kept:HTTP/1.1 200 OK\r\nServer: pillar\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n");
  EXPECT_EQ(Head(events, {.streamed = true, .keep_alive = false, .http10 = true}),
            "kept:HTTP/1.1 200 OK\r\nServer: pillar\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n");
}

TEST(ResponseHeadTest, NoValueCanEndTheHeadOrAddAHeader) {
  Response response = Json(503, "");
  response.content_type = "text/plain\r\nSet-Cookie: a=b";
  response.headers.emplace_back("Retry-After\r\n", "1\r\n\r\nHTTP/1.1 200 OK");
  const std::string head = Head(response, {});
  EXPECT_EQ(head,
            "kept:HTTP/1.1 503 Service Unavailable\r\nServer: pillar\r\n"
            "Content-Type: text/plainSet-Cookie: a=b\r\nContent-Length: 0\r\n"
            "Retry-After: 1HTTP/1.1 200 OK\r\n\r\n");
}

}  // namespace
}  // namespace pillar::http::internal
