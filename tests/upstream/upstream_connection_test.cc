// UpstreamConnection against a scripted upstream on loopback: a thread that accepts one
// connection, reads each request whole and answers with the pieces it is given. What is checked
// is the plain connection's reading by readiness: replies in pieces, bodies delimited by the
// close, bursts larger than one read, and an upstream that closes or writes while the connection
// idles.
#include "upstream/upstream_connection.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "upstream/endpoint.h"

namespace pillar::upstream {
namespace {

using namespace std::chrono_literals;

// What the upstream does for one request: writes `pieces` with `pause` between them.
struct Answer {
  std::vector<std::string> pieces;
  std::chrono::milliseconds pause{0};
};

// Accepts one connection and answers its requests in order; after the last answer, `then`
// runs on the connection's descriptor (close it, write stray bytes, or nothing).
class ScriptedUpstream {
 public:
  ScriptedUpstream(std::vector<Answer> answers, std::function<void(int)> then)
      : answers_(std::move(answers)), then_(std::move(then)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), size), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size), 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedUpstream() {
    ::shutdown(listener_, SHUT_RDWR);
    if (const int fd = connection_.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  uint16_t port() const { return port_; }

 private:
  void Serve() {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    connection_ = fd;
    std::string in;
    for (const Answer& answer : answers_) {
      if (!ReadRequest(fd, in)) break;
      for (size_t i = 0; i < answer.pieces.size(); ++i) {
        if (i > 0) std::this_thread::sleep_for(answer.pause);
        if (::send(fd, answer.pieces[i].data(), answer.pieces[i].size(), MSG_NOSIGNAL) < 0) break;
      }
    }
    if (then_) then_(fd);
    // Held until the client closes, so that an idle connection stays open unless `then_`
    // closed it.
    char byte;
    while (::recv(fd, &byte, 1, 0) > 0) {
    }
    ::close(fd);
  }

  // Reads one request: its head and the Content-Length bytes after it.
  static bool ReadRequest(int fd, std::string& in) {
    for (;;) {
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        if (const size_t at = in.find("Content-Length: "); at != std::string::npos && at < end) {
          length = std::stoul(in.substr(at + 16));
        }
        if (in.size() >= end + 4 + length) {
          in.erase(0, end + 4 + length);
          return true;
        }
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      in.append(chunk, size_t(n));
    }
  }

  std::vector<Answer> answers_;
  std::function<void(int)> then_;
  int listener_ = -1;
  std::atomic<int> connection_{-1};  // shut down by the destructor, which ends the thread
  uint16_t port_ = 0;
  std::thread thread_;
};

std::string Reply(std::string_view body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

class UpstreamConnectionTest : public ::testing::Test {
 protected:
  void ConnectTo(uint16_t port) {
    absl::StatusOr<Endpoint> endpoint = ParseEndpoint("http://127.0.0.1:" + std::to_string(port));
    ASSERT_TRUE(endpoint.ok());
    endpoint_ = *endpoint;
    bool finished = false;
    Connect(io_, endpoint_, nullptr, Clock::now() + 5s,
            [&](absl::StatusOr<std::shared_ptr<UpstreamConnection>> c) {
              finished = true;
              ASSERT_TRUE(c.ok()) << c.status();
              connection_ = *c;
            });
    RunUntil([&] { return finished; });
    ASSERT_NE(connection_, nullptr);
  }

  // One call on the connection, its reply or error.
  absl::StatusOr<UpstreamReply> CallOnce(int64_t max_body_bytes = 1 << 20) {
    auto request = std::make_shared<UpstreamRequest>();
    request->body = "{}";
    request->head = RequestHead("POST", "/v2/models/m/infer", endpoint_.host_header, {}, 2);
    std::optional<absl::StatusOr<UpstreamReply>> result;
    connection_->Call(
        request, Clock::now() + 5s, max_body_bytes,
        [&](absl::StatusOr<UpstreamReply> reply, CallFailure) { result = std::move(reply); },
        nullptr);
    RunUntil([&] { return result.has_value(); });
    return result.value_or(absl::DeadlineExceededError("the call never ended"));
  }

  void RunUntil(const std::function<bool()>& done) {
    const auto give_up = Clock::now() + 10s;
    while (!done() && Clock::now() < give_up) {
      io_.restart();
      io_.run_for(5ms);
    }
  }

  boost::asio::io_context io_;
  Endpoint endpoint_;
  std::shared_ptr<UpstreamConnection> connection_;
};

TEST_F(UpstreamConnectionTest, AReplyInPiecesIsReadWholeAndTheConnectionKept) {
  const std::string reply = Reply(R"({"outputs":[]})");
  ScriptedUpstream upstream(
      {{{reply.substr(0, 7), reply.substr(7, 30), reply.substr(37)}, 20ms}, {{reply}, 0ms}},
      nullptr);
  ConnectTo(upstream.port());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<UpstreamReply> r = CallOnce();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, R"({"outputs":[]})");
    EXPECT_TRUE(connection_->open());
  }
  EXPECT_EQ(connection_->calls(), 2);
}

TEST_F(UpstreamConnectionTest, ABurstLargerThanOneReadIsReadWhole) {
  const std::string body(200 * 1024, 'x');
  ScriptedUpstream upstream({{{Reply(body)}, 0ms}, {{Reply("again")}, 0ms}}, nullptr);
  ConnectTo(upstream.port());
  absl::StatusOr<UpstreamReply> r = CallOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, body);
  r = CallOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "again");
}

// A server that ends its replies with one line end too many, which reaches pillar only once the
// next request went out on the connection: the next reply starts with it. Line ends before a
// status line answer nothing (as RFC 9112 has servers skip them before a request line); the
// reply after them is the call's (remote_test ALineEndAfterAReplyKeepsTheConnection failed so
// in a full run, the line end late).
TEST_F(UpstreamConnectionTest, LineEndsBeforeAReplyAreSkipped) {
  ScriptedUpstream upstream(
      {{{Reply("one")}, 0ms}, {{"\r\n", Reply("two")}, 10ms}, {{"\r\n\r\n" + Reply("three")}, 0ms}},
      nullptr);
  ConnectTo(upstream.port());
  for (const char* body : {"one", "two", "three"}) {
    absl::StatusOr<UpstreamReply> r = CallOnce();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, body);
    EXPECT_TRUE(connection_->open());
  }
}

// Past a few, they are no stray line end but a stream out of step.
TEST_F(UpstreamConnectionTest, ManyLineEndsBeforeAReplyFailTheCall) {
  ScriptedUpstream upstream({{{std::string(200, '\n') + Reply("one")}, 0ms}}, nullptr);
  ConnectTo(upstream.port());
  absl::StatusOr<UpstreamReply> r = CallOnce();
  EXPECT_FALSE(r.ok());
}

TEST_F(UpstreamConnectionTest, ABodyDelimitedByTheCloseEndsWithIt) {
  ScriptedUpstream upstream(
      {{{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart one,", " two"}, 30ms}},
      [](int fd) { ::shutdown(fd, SHUT_WR); });
  ConnectTo(upstream.port());
  absl::StatusOr<UpstreamReply> r = CallOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "part one, two");
  EXPECT_FALSE(connection_->open());
}

TEST_F(UpstreamConnectionTest, AReplyCutShortFailsTheCallAndClosesTheConnection) {
  ScriptedUpstream upstream({{{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"}, 0ms}},
                            [](int fd) { ::shutdown(fd, SHUT_WR); });
  ConnectTo(upstream.port());
  absl::StatusOr<UpstreamReply> r = CallOnce();
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(connection_->open());
}

// The standing wait sees the upstream's close while the connection idles: it is closed there
// and then (its descriptor freed), not left half-closed until the next call finds it.
TEST_F(UpstreamConnectionTest, AnIdleConnectionTheUpstreamClosesIsClosedAtOnce) {
  ScriptedUpstream upstream({{{Reply("{}")}, 0ms}}, [](int fd) { ::shutdown(fd, SHUT_WR); });
  ConnectTo(upstream.port());
  ASSERT_TRUE(CallOnce().ok());
  RunUntil([&] { return !connection_->open(); });
  EXPECT_FALSE(connection_->open());
}

// Bytes nobody asked for while the connection idles (a late 408) would be read as the next
// request's reply: the connection is closed instead, and a call on it is refused unsent.
TEST_F(UpstreamConnectionTest, BytesWhileIdleCloseTheConnection) {
  ScriptedUpstream upstream({{{Reply("{}")}, 0ms}}, [](int fd) {
    std::this_thread::sleep_for(50ms);  // after the reply was read: the connection idles
    const std::string late = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n";
    EXPECT_GT(::send(fd, late.data(), late.size(), MSG_NOSIGNAL), 0);
  });
  ConnectTo(upstream.port());
  ASSERT_TRUE(CallOnce().ok());
  RunUntil([&] { return !connection_->open(); });
  EXPECT_FALSE(connection_->open());
  absl::StatusOr<UpstreamReply> r = CallOnce();
  EXPECT_FALSE(r.ok());
}

// Takes every piece of a streamed body at once.
class TakingSink final : public BodySink {
 public:
  void OnBody(std::string piece, absl::AnyInvocable<void(bool) &&> more) override {
    body += piece;
    std::move(more)(true);
  }
  std::string body;
};

// Found by review helper-102: an upstream that answered a 200 stream without reading the whole
// request, then reset the connection, failed the call as kBeforeReply, which a caller may send
// again; the client then read the first attempt's events and a second attempt's answer spliced
// into one stream. Once a reply began, its failure is kDuringReply.
TEST_F(UpstreamConnectionTest, AReplyBeganBeforeTheRequestsWriteFailedIsNotSentAgain) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size), 0);
  std::thread upstream([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::string head;
    char byte;
    while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd, &byte, 1, 0) == 1) {
      head += byte;
    }
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        "\r\n12\r\ndata: {\"part\":1}\n\n\r\n";
    ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(300ms);
    ::close(fd);  // with the request's body unread: a reset
  });
  ConnectTo(ntohs(address.sin_port));
  auto request = std::make_shared<UpstreamRequest>();
  const std::string body(16 << 20, 'x');  // more than the socket buffers hold
  request->body = body;
  request->head =
      RequestHead("POST", "/v1/chat/completions", endpoint_.host_header, {}, body.size());
  auto sink = std::make_shared<TakingSink>();
  std::optional<CallFailure> failure;
  connection_->Call(
      request, Clock::now() + 5s, 1 << 20,
      [&](absl::StatusOr<UpstreamReply> reply, CallFailure f) {
        EXPECT_FALSE(reply.ok());
        failure = f;
      },
      sink);
  RunUntil([&] { return failure.has_value(); });
  upstream.join();
  ::close(listener);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(sink->body, "data: {\"part\":1}\n\n");
  EXPECT_EQ(*failure, CallFailure::kDuringReply);
}

}  // namespace
}  // namespace pillar::upstream
