#include "upstream/upstream_connection.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <cerrno>
#include <type_traits>

#include "common/strings.h"
#include "upstream/connection_parts.h"
#include "upstream/reply_parser.h"

namespace pillar::upstream {
namespace {

using internal::Socket;
using internal::Timer;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
constexpr size_t kMaxBufferBytes = 64 * 1024;
constexpr size_t kReadBytes = 8 * 1024;
constexpr int kMaxInterimReplies = 8;
constexpr size_t kMaxSkippedLineEnds = 64;

std::string Describe(const error_code& ec) {
  if (ec == http::error::body_limit) return "the reply is over max_response_bytes";
  if (ec == http::error::header_limit) return "the reply's header is over 16 KiB";
  if (ec == http::error::buffer_overflow) return "a chunk header or trailer is over 64 KiB";
  if (ec == http::error::bad_status) return "the reply's status is not an HTTP status";
  if (ec == http::error::end_of_stream || ec == asio::error::eof) {
    return "the upstream closed the connection";
  }
  return ec.message();
}

template <class Stream>  // Socket, or asio::ssl::stream<Socket>
class ConnectionImpl final : public UpstreamConnection,
                             public std::enable_shared_from_this<ConnectionImpl<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, Socket>;

 public:
  template <class... Args>
  ConnectionImpl(asio::io_context& io, Args&&... args)
      : stream_(io, std::forward<Args>(args)...), timer_(io) {
    // Beast reads what the buffer has room for, 512 bytes at first: a reply of a few KiB then
    // took several reads, and the buffer as many reallocations.
    buffer_.reserve(kReadBytes);
  }

  Stream& stream() { return stream_; }
  Socket& socket() {
    if constexpr (std::is_same_v<Stream, Socket>) {
      return stream_;
    } else {
      return stream_.next_layer();
    }
  }

  void Call(std::shared_ptr<const UpstreamRequest> request, Clock::time_point deadline,
            int64_t max_body_bytes, ReplyCallback done, std::shared_ptr<BodySink> stream) override {
    ++calls_;
    request_ = std::move(request);
    done_ = std::move(done);
    stream_sink_ = std::move(stream);
    awaiting_sink_ = false;
    max_body_bytes_ = max_body_bytes;
    interim_replies_ = 0;
    skipped_line_ends_ = 0;
    write_error_ = {};
    timed_out_ = false;
    NewParser();
    // Closed while idle (a reconfiguration, a stop), or closed by the upstream, or with bytes
    // nobody asked for: nothing is written, and the caller may send the request elsewhere.
    // Checked here, as the call starts on its own loop, and not where the caller chose the
    // connection under its lock: it is a system call.
    if (!open_ || (calls_ > 1 && !IdleFor(*request_))) {
      return asio::post(socket().get_executor(), [self = this->shared_from_this()] {
        self->Fail(asio::error::not_connected, CallFailure::kNotSent);
      });
    }
    ArmTimer(deadline);
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(request_->head),
                                                       asio::buffer(request_->body)};
    asio::async_write(stream_, buffers, [self = this->shared_from_this()](error_code ec, size_t) {
      self->OnWritten(ec);
    });
  }

  bool open() const override { return open_; }

  bool Idle() override {
    if (!open_) return false;
    if (HoldsUnreadTls()) {  // what the peek below cannot see
      unasked_bytes_ = true;
      Close();
      return false;
    }
    // An idle kept-alive connection has nothing to read. A byte (a late 408, the rest of some
    // earlier reply, a TLS alert) or the end of the stream means the next reply read on it
    // would not be the reply to the next request: it is closed instead of reused.
    const IdleBytes held = Peek();
    if (held == IdleBytes::kNone) {
      if constexpr (!kTls) {
        // Empty now, in this handler: a wait armed here misses nothing that comes after.
        readable_ = false;
        ArmWait();
      }
      return true;
    }
    unasked_bytes_ = held == IdleBytes::kUnasked;
    Close();
    return false;
  }

  // What an idle connection's socket holds: nothing, bytes nobody asked for, or its end (or an
  // error). On a plain connection, line ends are taken off and dropped (a server that ends a
  // reply with one too many, sent apart from it), up to 64 bytes of them.
  enum class IdleBytes { kNone, kUnasked, kEnd };
  IdleBytes Peek() {
    const int fd = socket().native_handle();
    for (int round = 0;; ++round) {
      char bytes[16];
      const ssize_t n = ::recv(fd, bytes, sizeof bytes, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return IdleBytes::kNone;
      if (n <= 0) return IdleBytes::kEnd;
      const bool line_ends =
          std::string_view(bytes, size_t(n)).find_first_not_of("\r\n") == std::string_view::npos;
      if (kTls || !line_ends || round == 4) return IdleBytes::kUnasked;
      if (::recv(fd, bytes, size_t(n), MSG_DONTWAIT) != n) return IdleBytes::kEnd;
    }
  }

  // Whether TLS took bytes off the socket that no reply has read: records OpenSSL holds, or
  // bytes asio fed it that it has not read yet. An upstream's reply and whatever it sent after
  // it (a second reply, a stray record) can arrive together; the socket then looks empty while
  // the next call on the connection would read them as its reply.
  bool HoldsUnreadTls() {
    if constexpr (std::is_same_v<Stream, Socket>) {
      return false;
    } else {
      SSL* ssl = stream_.native_handle();
      return SSL_has_pending(ssl) == 1 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
    }
  }

  void Close() override {
    if (!open_) return;
    open_ = false;
    error_code ignored;
    timer_.cancel();
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
    if (awaiting_sink_) {
      // No read is in progress to fail: the call ends here (on the loop, after this returns).
      awaiting_sink_ = false;
      asio::post(socket().get_executor(), [self = this->shared_from_this(), call = calls_] {
        if (call == self->calls_ && self->done_) {
          self->End(absl::UnavailableError(self->timed_out_ ? "no reply before the deadline"
                                                            : "the connection was closed"),
                    self->timed_out_ ? CallFailure::kDeadline : CallFailure::kDuringReply);
        }
      });
    }
  }

 private:
  // One timer for the whole call (tcp_stream arms one per operation). A wait that ends after
  // its call did is told apart by the call's number.
  void ArmTimer(Clock::time_point deadline) {
    timer_.expires_at(deadline);
    timer_.async_wait([self = this->shared_from_this(), call = calls_](error_code ec) {
      if (ec || call != self->calls_ || !self->done_) return;
      self->timed_out_ = true;
      self->Close();  // the write or read in progress ends with an error
    });
  }

  void OnWritten(const error_code& ec) {
    if (timed_out_) return Fail(ec, CallFailure::kDeadline);
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
  void Read() { ReadUntil(Until::kHeader, &ConnectionImpl::OnHeader); }

  // What a read waits for, as Beast's async_read_header, async_read and async_read_some do.
  enum class Until { kHeader, kMessage, kProgress };
  using Then = void (ConnectionImpl::*)(const error_code&);

  void ReadUntil(Until until, Then then) {
    if constexpr (kTls) {
      auto handler = [self = this->shared_from_this(), then](error_code ec, size_t) {
        ((*self).*then)(ec);
      };
      switch (until) {
        case Until::kHeader:
          return http::async_read_header(stream_, buffer_, *parser_, std::move(handler));
        case Until::kMessage:
          return http::async_read(stream_, buffer_, *parser_, std::move(handler));
        case Until::kProgress:
          return http::async_read_some(stream_, buffer_, *parser_, std::move(handler));
      }
    } else {
      until_ = until;
      then_ = then;
      Pump();
    }
  }

  // Parses what the buffer holds and reads what the socket holds until the read's condition,
  // an error, or a socket with nothing yet (the standing wait then calls Pump again). Runs
  // `then_` in this handler, as Beast's reads would after they completed.
  void Pump() {
    error_code ec;
    for (;;) {
      if (buffer_.size() > 0 && !parser_->got_some() && !SkipLineEnds()) {
        ec = http::error::bad_line_ending;
        break;
      }
      if (buffer_.size() > 0) {
        const size_t used = parser_->put(buffer_.data(), ec);
        buffer_.consume(used);
        if (ec != http::error::need_more) {
          if (ec || Reached()) break;
          if (used > 0) continue;  // on with what is left (a body after its header)
        }
        ec = {};
      }
      if (!Receive(ec)) return;  // the wait calls again
      if (ec == asio::error::eof) {
        if (!parser_->got_some()) {
          ec = http::error::end_of_stream;
          break;
        }
        ec = {};
        parser_->put_eof(ec);  // ends a body delimited by the close, or partial_message
        break;
      }
      if (ec) break;
    }
    ((*this).*then_)(ec);
  }

  // Line ends before a reply's status line answer nothing: the end of a server's previous reply
  // (one line end too many) that came after the next request went out. Skipped, as RFC 9112
  // has servers skip them before a request line, up to kMaxSkippedLineEnds a call; false past
  // that (a stream out of step, not a stray line end).
  bool SkipLineEnds() {
    const std::string_view held(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    const size_t ends = std::min(held.find_first_not_of("\r\n"), held.size());
    skipped_line_ends_ += ends;
    buffer_.consume(ends);
    return skipped_line_ends_ <= kMaxSkippedLineEnds;
  }

  bool Reached() const {
    switch (until_) {
      case Until::kHeader:
        return parser_->is_header_done();
      case Until::kMessage:
        return parser_->is_done();
      case Until::kProgress:
        return true;
    }
    return true;
  }

  // Reads what the socket holds into the buffer: true with bytes, the end of the stream (eof)
  // or an error in `ec`; false when it has nothing yet and the standing wait will call Pump.
  bool Receive(error_code& ec) {
    if (!open_) {  // closed for the deadline or by Close(): the read in progress fails
      ec = asio::error::operation_aborted;
      return true;
    }
    if (!readable_ && waiting_) {
      reading_ = true;
      return false;
    }
    const size_t size = std::min(buffer_.max_size() - buffer_.size(),
                                 std::max(kReadBytes, buffer_.capacity() - buffer_.size()));
    if (size == 0) {
      ec = http::error::buffer_overflow;
      return true;
    }
    const asio::mutable_buffer space = buffer_.prepare(size);
    for (;;) {
      const ssize_t n = ::recv(socket().native_handle(), space.data(), size, MSG_DONTWAIT);
      if (n > 0) {
        buffer_.commit(size_t(n));
        // A short read emptied the socket: whatever comes next wakes the wait armed now, in
        // the handler that read, before the loop polls again.
        readable_ = size_t(n) == size;
        if (!readable_) ArmWait();
        return true;
      }
      readable_ = false;
      if (n == 0) {
        ec = asio::error::eof;
        return true;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ArmWait();
        reading_ = true;
        return false;
      }
      ec = error_code(errno, boost::system::system_category());
      return true;
    }
  }

  // The standing wait: a plain connection keeps one queued from its first read on. It holds
  // the connection weakly, so an idle connection its pool dropped is destroyed (its socket
  // closed, the wait cancelled) rather than kept by its own wait; a call in progress is held by
  // its timer.
  void ArmWait() {
    if (waiting_ || !open_) return;
    waiting_ = true;
    socket().async_wait(Socket::wait_read, [weak = this->weak_from_this()](error_code ec) {
      if (auto self = weak.lock()) self->OnReadable(ec);
    });
  }

  void OnReadable(const error_code& ec) {
    waiting_ = false;
    if (ec) {  // the socket was closed: a read waiting on it fails
      if (std::exchange(reading_, false)) ((*this).*then_)(ec);
      return;
    }
    readable_ = true;
    if (std::exchange(reading_, false)) return Pump();
    if (done_ || !open_) return;  // a call in progress reads it when it is ready to
    // Idle: a close by the upstream, bytes nobody asked for, or a stale wake-up.
    const IdleBytes held = Peek();
    if (held == IdleBytes::kNone) {
      readable_ = false;
      return ArmWait();
    }
    unasked_bytes_ = held == IdleBytes::kUnasked;
    Close();
    if (unasked_bytes_ && on_unasked_) std::exchange(on_unasked_, nullptr)();
  }

  // Whether this idle connection may carry `request`. A plain one whose wait has seen nothing
  // since its last reply was read is taken as it is, unless the request may not be sent again:
  // then the socket is asked (a close the loop has not polled yet fails the call unsent).
  bool IdleFor(const UpstreamRequest& request) {
    if constexpr (!kTls) {
      if (open_ && waiting_ && !readable_ && request.resend_safe) return true;
    }
    return Idle();
  }

  void OnHeader(const error_code& ec) {
    if (ec && timed_out_) return Fail(ec, CallFailure::kDeadline);
    if (ec && write_error_) return Fail(write_error_, FailureAfterWriteError());
    if (ec || parser_->is_done()) return OnRead(ec);
    if (const auto length = parser_->content_length();
        length && *length > uint64_t(max_body_bytes_)) {
      return Fail(http::error::body_limit, CallFailure::kDuringReply);
    }
    if (stream_sink_ && parser_->status() == 200) return ReadStreamed();
    ReadUntil(Until::kMessage, &ConnectionImpl::OnRead);
  }

  // A request whose write failed (the server stopped reading it) may have been read in part or
  // not at all: before any reply byte, sending it again is as safe as the model says; once a
  // reply began, it was served, and its end failed (review helper-102: a stream cut after its
  // first events was sent again, and the client read two answers spliced into one).
  CallFailure FailureAfterWriteError() const {
    return parser_->got_some() || interim_replies_ > 0 ? CallFailure::kDuringReply
                                                       : CallFailure::kBeforeReply;
  }

  void OnRead(const error_code& ec) {
    if (ec && timed_out_) return Fail(ec, CallFailure::kDeadline);
    if (ec && write_error_) return Fail(write_error_, FailureAfterWriteError());
    if (ec) {
      return Fail(ec, parser_->got_some() || interim_replies_ > 0 ? CallFailure::kDuringReply
                                                                  : CallFailure::kBeforeReply);
    }
    if (parser_->status() / 100 == 1) {
      // 100 Continue, 103 Early Hints: interim replies, which HTTP/1.1 lets a server send before
      // the final one. Skipped (a few of them; the deadline bounds the rest).
      if (++interim_replies_ > kMaxInterimReplies) {
        return Fail(http::error::bad_status, CallFailure::kDuringReply,
                    "too many interim (1xx) replies");
      }
      NewParser();
      return Read();
    }
    UpstreamReply reply;
    reply.status = parser_->status();
    reply.retry_after_s = parser_->retry_after_s();
    reply.shed_for_deadline = parser_->shed_for_deadline();
    const bool keep_alive = parser_->keep_alive();
    if (parser_->body().size() > size_t(max_body_bytes_)) {  // a chunked body, counted as it came
      return Fail(http::error::body_limit, CallFailure::kDuringReply);
    }
    reply.body = std::move(parser_->body());
    if (write_error_) Close();  // the server stopped reading: the connection is done
    // Bytes after the reply were not asked for (a second reply, a body a 204 should not have):
    // whatever reads this connection next would take them for its own reply.
    // Line ends after a reply (a server that ends a body with one too many) answer nothing.
    const std::string_view rest(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    if (!rest.empty() && rest.find_first_not_of("\r\n") == std::string_view::npos) {
      buffer_.consume(rest.size());
    }
    if (buffer_.size() != 0 || HoldsUnreadTls()) unasked_bytes_ = true;
    if (!keep_alive || unasked_bytes_) Close();
    End(std::move(reply), CallFailure::kNone);
  }

  // A streamed reply's body: what each read brings goes to the sink, and the next read waits for
  // it to be taken.
  void ReadStreamed() { ReadUntil(Until::kProgress, &ConnectionImpl::OnStreamed); }

  void OnStreamed(const error_code& ec) {
    if (ec) return OnRead(ec);
    if (parser_->body().size() > size_t(max_body_bytes_)) {
      return Fail(http::error::body_limit, CallFailure::kDuringReply);
    }
    std::string piece = std::move(parser_->body());
    parser_->body().clear();
    const bool done = parser_->is_done();
    if (piece.empty()) return done ? OnRead(ec) : ReadStreamed();
    awaiting_sink_ = true;
    stream_sink_->OnBody(
        std::move(piece), [self = this->shared_from_this(), call = calls_, done](bool go_on) {
          asio::post(self->socket().get_executor(), [self, call, done, go_on] {
            if (call != self->calls_ || !self->done_ || !self->awaiting_sink_) return;
            self->awaiting_sink_ = false;
            if (!go_on) {
              return self->Fail(asio::error::operation_aborted, CallFailure::kDuringReply,
                                "the stream was stopped");
            }
            if (done) return self->OnRead(error_code{});
            self->ReadStreamed();
          });
        });
  }

  void Fail(const error_code& ec, CallFailure failure, std::string_view why = {}) {
    Close();
    End(absl::UnavailableError(timed_out_     ? std::string("no reply before the deadline")
                               : !why.empty() ? std::string(why)
                                              : Describe(ec)),
        failure);
  }

  void End(absl::StatusOr<UpstreamReply> reply, CallFailure failure) {
    if (open_) timer_.cancel();
    parser_.reset();
    request_.reset();
    stream_sink_.reset();
    awaiting_sink_ = false;
    std::move(std::exchange(done_, nullptr))(std::move(reply), failure);
  }

  Stream stream_;
  Timer timer_;
  // Bounded: Beast limits a reply's header and body, not its chunk-size lines, chunk extensions
  // or trailers, which pass through this buffer.
  beast::flat_buffer buffer_{kMaxBufferBytes};
  int64_t max_body_bytes_ = 0;
  int interim_replies_ = 0;
  size_t skipped_line_ends_ = 0;  // before this call's reply (SkipLineEnds)
  error_code write_error_;        // the request's write failed; the answer may still be readable
  bool timed_out_ = false;        // the call's deadline passed: the connection was closed for it
  std::optional<ReplyParser> parser_;
  std::shared_ptr<const UpstreamRequest> request_;
  ReplyCallback done_;
  std::shared_ptr<BodySink> stream_sink_;
  bool awaiting_sink_ = false;  // a streamed piece is with the sink: no read is in progress
  bool open_ = true;
  // Plain connections' reads (Pump): the read in progress, its condition and what follows it.
  Until until_ = Until::kHeader;
  Then then_ = nullptr;
  bool reading_ = false;   // a read waits for the standing wait
  bool waiting_ = false;   // the standing wait is queued
  bool readable_ = false;  // it fired (or the last read filled its space): read before waiting
};

using PlainConnection = ConnectionImpl<Socket>;
using TlsConnection = ConnectionImpl<asio::ssl::stream<Socket>>;

}  // namespace

namespace internal {

Unconnected NewPlainConnection(asio::io_context& io) {
  auto connection = std::make_shared<PlainConnection>(io);
  Socket& socket = connection->socket();
  return {std::move(connection), &socket, nullptr};
}

Unconnected NewTlsConnection(asio::io_context& io, asio::ssl::context& tls) {
  auto connection = std::make_shared<TlsConnection>(io, tls);
  Socket& socket = connection->socket();
  asio::ssl::stream<Socket>& stream = connection->stream();
  return {std::move(connection), &socket, &stream};
}

}  // namespace internal

std::string RequestHead(std::string_view method, std::string_view target, std::string_view host,
                        std::initializer_list<std::pair<std::string_view, std::string_view>> fields,
                        size_t body_bytes) {
  std::string head;
  head.reserve(128 + target.size() + host.size());
  StrAppend(&head, method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n");
  for (const auto& [name, value] : fields) {
    if (!value.empty()) StrAppend(&head, name, ": ", value, "\r\n");
  }
  if (body_bytes != 0 || method != "GET") StrAppend(&head, "Content-Length: ", body_bytes, "\r\n");
  head += "\r\n";
  return head;
}

}  // namespace pillar::upstream
