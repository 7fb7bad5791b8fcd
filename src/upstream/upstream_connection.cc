#include "upstream/upstream_connection.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cerrno>
#include <charconv>

#include "common/strings.h"

namespace pillar::upstream {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
constexpr size_t kMaxBufferBytes = 64 * 1024;
constexpr int kMaxInterimReplies = 8;

std::string Describe(const error_code& ec) {
  if (ec == beast::error::timeout) return "no reply before the deadline";
  if (ec == http::error::body_limit) return "the reply is over max_response_bytes";
  if (ec == http::error::header_limit) return "the reply's header is over 16 KiB";
  if (ec == http::error::buffer_overflow) return "a chunk header or trailer is over 64 KiB";
  if (ec == http::error::bad_status) return "too many interim (1xx) replies";
  if (ec == http::error::end_of_stream || ec == asio::error::eof) {
    return "the upstream closed the connection";
  }
  return ec.message();
}

std::optional<int64_t> RetryAfterSeconds(std::string_view value) {
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  // The HTTP-date form is not read: an upstream that sends it gets the default back-off.
  if (ec != std::errc() || end != value.data() + value.size() || seconds < 0) return std::nullopt;
  return std::min<int64_t>(seconds, 3600);
}

template <class Stream>
class ConnectionImpl final : public UpstreamConnection,
                             public std::enable_shared_from_this<ConnectionImpl<Stream>> {
 public:
  template <class... Args>
  explicit ConnectionImpl(Args&&... args) : stream_(std::forward<Args>(args)...) {}

  Stream& stream() { return stream_; }
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  void Call(std::shared_ptr<const HttpRequest> request, Clock::time_point deadline,
            int64_t max_body_bytes, ReplyCallback done) override {
    ++calls_;
    request_ = std::move(request);
    done_ = std::move(done);
    max_body_bytes_ = max_body_bytes;
    interim_replies_ = 0;
    write_error_ = {};
    NewParser();
    tcp().expires_at(deadline);
    http::async_write(stream_, *request_, [self = this->shared_from_this()](error_code ec, size_t) {
      self->OnWritten(ec);
    });
  }

  bool open() const override { return open_; }

  bool Idle() override {
    if (!open_) return false;
    // An idle kept-alive connection has nothing to read. A byte (a late 408, the rest of some
    // earlier reply, a TLS alert) or the end of the stream means the next reply read on it
    // would not be the reply to the next request: it is closed instead of reused.
    char byte;
    const ssize_t n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    Close();
    return false;
  }

  void Close() override {
    if (!open_) return;
    open_ = false;
    error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
  }

 private:
  void OnWritten(const error_code& ec) {
    if (ec == beast::error::timeout) return Fail(ec, CallFailure::kDeadline);
    // A server may answer before it has read the whole request (a 413 for a body over its
    // limit) and close: the write then fails, but its answer is there to read, and it says the
    // request was refused, not that the server failed.
    write_error_ = ec;
    Read();
  }

  void NewParser() {
    parser_.emplace();
    parser_->body_limit(uint64_t(max_body_bytes_));
    parser_->header_limit(kMaxHeaderBytes);
  }

  // The header first, so that a declared length over the limit ends the call before any of
  // the body is read (Beast's own body_limit was seen to let a 2 MiB body through a 1 MiB
  // limit when the header and the body arrived together), then the body.
  void Read() {
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(const error_code& ec) {
    if (ec && write_error_) return Fail(write_error_, CallFailure::kBeforeReply);
    if (ec || parser_->is_done()) return OnRead(ec);
    if (const auto length = parser_->content_length();
        length && *length > uint64_t(max_body_bytes_)) {
      return Fail(http::error::body_limit, CallFailure::kDuringReply);
    }
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(const error_code& ec) {
    if (ec && write_error_) return Fail(write_error_, CallFailure::kBeforeReply);
    if (ec) {
      return Fail(ec, ec == beast::error::timeout                   ? CallFailure::kDeadline
                      : parser_->got_some() || interim_replies_ > 0 ? CallFailure::kDuringReply
                                                                    : CallFailure::kBeforeReply);
    }
    http::response<http::string_body>& response = parser_->get();
    if (response.result_int() / 100 == 1) {
      // 100 Continue, 103 Early Hints: interim replies, which HTTP/1.1 lets a server send before
      // the final one. Skipped (a few of them; the deadline bounds the rest).
      if (++interim_replies_ > kMaxInterimReplies) {
        return Fail(http::error::bad_status, CallFailure::kDuringReply);
      }
      NewParser();
      return Read();
    }
    UpstreamReply reply;
    reply.status = int(response.result_int());
    if (auto it = response.find(http::field::retry_after); it != response.end()) {
      reply.retry_after_s =
          RetryAfterSeconds(std::string_view(it->value().data(), it->value().size()));
    }
    // A pillar upstream that refused the request only because the caller's deadline is too short
    // for its queue.
    if (auto it = response.find("X-Pillar-Shed"); it != response.end()) {
      reply.shed_for_deadline =
          std::string_view(it->value().data(), it->value().size()) == "deadline";
    }
    const bool keep_alive = response.keep_alive();
    if (response.body().size() > size_t(max_body_bytes_)) {  // a chunked body, counted as it came
      return Fail(http::error::body_limit, CallFailure::kDuringReply);
    }
    reply.body = std::move(response.body());
    if (write_error_) Close();  // the server stopped reading: the connection is done
    parser_.reset();
    request_.reset();
    tcp().expires_never();
    // Bytes after the reply were not asked for (a second reply, a body a 204 should not have):
    // whatever reads this connection next would take them for its own reply.
    if (!keep_alive || buffer_.size() != 0) Close();
    std::move(done_)(std::move(reply), CallFailure::kNone);
  }

  void Fail(const error_code& ec, CallFailure failure) {
    Close();
    parser_.reset();
    request_.reset();
    std::move(done_)(absl::UnavailableError(Describe(ec)), failure);
  }

  Stream stream_;
  // Bounded: Beast limits a reply's header and body, not its chunk-size lines, chunk extensions
  // or trailers, which pass through this buffer.
  beast::flat_buffer buffer_{kMaxBufferBytes};
  int64_t max_body_bytes_ = 0;
  int interim_replies_ = 0;
  error_code write_error_;  // the request's write failed; the answer may still be readable
  std::optional<http::response_parser<http::string_body>> parser_;
  std::shared_ptr<const HttpRequest> request_;
  ReplyCallback done_;
  bool open_ = true;
};

using PlainConnection = ConnectionImpl<beast::tcp_stream>;
using TlsConnection = ConnectionImpl<beast::ssl_stream<beast::tcp_stream>>;

// One connection attempt: resolve (with a timer, since a resolver has no deadline of its own),
// connect, and for TLS the handshake.
struct Connector : std::enable_shared_from_this<Connector> {
  Connector(asio::io_context& io, Endpoint endpoint, std::shared_ptr<asio::ssl::context> tls,
            Clock::time_point deadline, ConnectCallback done)
      : io(io),
        endpoint(std::move(endpoint)),
        tls(std::move(tls)),
        deadline(deadline),
        resolver(io),
        timer(io),
        done(std::move(done)) {}

  void Start() {
    error_code ec;
    const asio::ip::address address = asio::ip::make_address(endpoint.host, ec);
    if (!ec) {
      results = tcp::resolver::results_type::create(tcp::endpoint(address, endpoint.port),
                                                    endpoint.host, std::to_string(endpoint.port));
      return ConnectTo();
    }
    timer.expires_at(deadline);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->resolver.cancel();
    });
    resolver.async_resolve(
        endpoint.host, std::to_string(endpoint.port),
        [self = shared_from_this()](error_code ec, tcp::resolver::results_type r) {
          self->timer.cancel();
          if (ec) {
            return self->Finish(
                absl::UnavailableError(ec == asio::error::operation_aborted
                                           ? std::string("name resolution timed out")
                                           : StrCat("cannot resolve the host: ", ec.message())));
          }
          self->results = std::move(r);
          self->ConnectTo();
        });
  }

  void ConnectTo() {
    if (endpoint.tls) {
      tls_connection = std::make_shared<TlsConnection>(io, *tls);
      Connect(tls_connection->tcp());
    } else {
      plain_connection = std::make_shared<PlainConnection>(io);
      Connect(plain_connection->tcp());
    }
  }

  void Connect(beast::tcp_stream& stream) {
    stream.expires_at(deadline);
    stream.async_connect(results, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
      if (ec) {
        return self->Finish(absl::UnavailableError(ec == beast::error::timeout
                                                       ? std::string("the connection timed out")
                                                       : StrCat("cannot connect: ", ec.message())));
      }
      if (self->endpoint.tls) return self->Handshake();
      self->plain_connection->tcp().expires_never();
      self->plain_connection->tcp().socket().set_option(tcp::no_delay(true));
      self->Finish(std::shared_ptr<UpstreamConnection>(self->plain_connection));
    });
  }

  void Handshake() {
    auto& stream = tls_connection->stream();
    error_code not_an_address;
    asio::ip::make_address(endpoint.host, not_an_address);
    // Server Name Indication is for names only; an address is checked against the certificate's
    // IP entries by the same verification.
    if (not_an_address &&
        !SSL_set_tlsext_host_name(stream.native_handle(), endpoint.host.c_str())) {
      return Finish(absl::InternalError("cannot set the TLS server name"));
    }
    stream.set_verify_mode(asio::ssl::verify_peer);
    stream.set_verify_callback(asio::ssl::host_name_verification(endpoint.host));
    stream.async_handshake(
        asio::ssl::stream_base::client, [self = shared_from_this()](error_code ec) {
          if (ec) {
            return self->Finish(absl::UnavailableError(
                ec == beast::error::timeout ? std::string("the TLS handshake timed out")
                                            : StrCat("TLS handshake failed: ", ec.message())));
          }
          self->tls_connection->tcp().expires_never();
          self->tls_connection->tcp().socket().set_option(tcp::no_delay(true));
          self->Finish(std::shared_ptr<UpstreamConnection>(self->tls_connection));
        });
  }

  void Finish(absl::StatusOr<std::shared_ptr<UpstreamConnection>> result) {
    if (!result.ok()) {
      if (plain_connection) plain_connection->Close();
      if (tls_connection) tls_connection->Close();
    }
    std::move(done)(std::move(result));
  }

  asio::io_context& io;
  const Endpoint endpoint;
  const std::shared_ptr<asio::ssl::context> tls;
  const Clock::time_point deadline;
  tcp::resolver resolver;
  asio::steady_timer timer;
  tcp::resolver::results_type results;
  std::shared_ptr<PlainConnection> plain_connection;
  std::shared_ptr<TlsConnection> tls_connection;
  ConnectCallback done;
};

}  // namespace

void Connect(asio::io_context& io, const Endpoint& endpoint,
             std::shared_ptr<asio::ssl::context> tls, Clock::time_point deadline,
             ConnectCallback done) {
  std::make_shared<Connector>(io, endpoint, std::move(tls), deadline, std::move(done))->Start();
}

}  // namespace pillar::upstream
