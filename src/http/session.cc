// The members of Session (session.h) that read a request and answer it, defined once for a
// plaintext and once for a TLS connection; a streamed response's are in session_stream.cc, the
// connection's end (shutdown, linger, cut answers, close) in session_end.cc.
#include "http/session.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string_view>

namespace pillar::http::internal {

template <bool kTls>
void Session<kTls>::OnDeadline() {
  beast::error_code ignored;
  switch (waiting_) {
    case Waiting::kRequest:  // answered 408 by OnReadError
    case Waiting::kIdle:     // the read's handler lingers: an answer may still be on its way
    case Waiting::kShutdown:
      timed_out_ = true;
      Socket().cancel(ignored);
      return;
    case Waiting::kWrite:
      // The stalled answer is cut; the write's handler lingers, not resets: a reset would drop
      // with it the answers written whole before it on the same connection, which the client
      // may still be reading (review helper-113: pipelined answers cut). Counted, and the
      // write's handler tells the handler (AnswerCut): the access log said how the request was
      // answered before the answer was written.
      listener_.Reject(core_, "write_timeout");
      timed_out_ = true;
      Socket().cancel(ignored);
      return;
    case Waiting::kLinger:
      return OnLingerDeadline();
    case Waiting::kHandshake:
    case Waiting::kNothing:
      // Nothing was asked, so nothing is owed: reset, so that no handshake bytes outlive it.
      Socket().set_option(net::socket_base::linger(true, 0), ignored);
      Socket().close(ignored);
      return;
  }
}

template <bool kTls>
void Session<kTls>::Begin() {
  loop_.sessions.push_back(this->weak_from_this());
  if constexpr (kTls) {
    Arm(Waiting::kHandshake, core_.limits.tls_handshake_timeout);
    stream_.async_handshake(
        ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
          self->Disarm();
          if (ec) {
            self->listener_.HandshakeFailed(
                self->core_, self->remote_,
                HandshakeFailure(self->stream_.native_handle(), ec.message()),
                SystemClock().MonotonicNanos());
            self->Linger();  // the alert that says why is owed
            return;
          }
          self->client_.Handshaken(self->stream_.native_handle(), self->listener_,
                                   SystemClock().MonotonicNanos());
          self->WaitForRequest();
        });
  } else {
    WaitForRequest();
  }
}

template <bool kTls>
void Session<kTls>::WaitForRequest(int64_t idle_until_ns) {
  parser_.emplace();
  parser_->body_limit(core_.limits.body_limit_bytes);
  parser_->on_chunk_body(chunk_body_sink_);
  body_charged_ = 0;
  header_reader_ = HeaderReader(core_.limits.header_limit_bytes, core_.limits.header_fields_limit);
  body_reader_ = BodyReader(core_.limits.header_limit_bytes, core_.limits.header_fields_limit);
  if (buffer_.size() > 0) {
    // No idle wait began: line ends alone among these bytes begin one (review helper-107: the
    // deadline of an idle wait before the last request was kept, and closed the connection).
    idle_deadline_ns_ = idle_until_ns;
    Arm(Waiting::kRequest, core_.limits.request_timeout);
    ParseHeader();
    return;
  }
  Arm(Waiting::kIdle, core_.limits.idle_timeout);
  if (idle_until_ns != 0) deadline_ns = request_deadline_ns_ = idle_until_ns;
  idle_deadline_ns_ = deadline_ns;
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                            self->Disarm();
                            if (ec) {
                              // Idle timeout or the peer went away between requests: nothing
                              // more is asked, but the last answers may still be on their way.
                              self->Linger();
                              return;
                            }
                            self->buffer_.commit(n);
                            self->Arm(Waiting::kRequest, self->core_.limits.request_timeout);
                            self->ParseHeader();
                          });
}

template <bool kTls>
void Session<kTls>::ParseHeader() {
  if (!parser_->got_some()) {
    // Line ends before a request line are ignored, as RFC 9112 (2.2) asks (some clients end a
    // body with one more; review helper-96: the next request on the connection got 400).
    const std::string_view held(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(std::min(held.size(), held.find_first_not_of("\r\n")));
    // Nothing else came: the connection is idle again, under the idle timeout, not waiting for
    // a request whose timeout would answer 408 to a client that asked nothing (review
    // helper-97); under the idle wait's deadline as it was, or line ends sent now and then
    // would hold the connection past idle_timeout_ms for ever.
    if (buffer_.size() == 0) return WaitForRequest(idle_deadline_ns_);
  }
  if (buffer_.size() > 0) {
    size_t used = 0;
    beast::error_code ec;
    HeaderReader::Result result = header_reader_.Put(*parser_, buffer_.data(), used, ec);
    buffer_.consume(used);
    switch (result) {
      case HeaderReader::Result::kNeedMore:
        break;
      case HeaderReader::Result::kDone:
        OnHeader();
        return;
      case HeaderReader::Result::kTooLarge:
        OnReadError(bhttp::error::header_limit);
        return;
      case HeaderReader::Result::kTooManyFields:
        Reject(431,
               StrCat("the request header has more than ", core_.limits.header_fields_limit,
                      " fields"),
               "too_many_headers");
        return;
      case HeaderReader::Result::kError:
        OnReadError(ec);
        return;
    }
  }
  ReadMore(&Session::ParseHeader);
}

template <bool kTls>
void Session<kTls>::ReadMore(void (Session::*then)()) {
  // The deadline fired while no read was pending (a completion, this session's last read's or
  // its 100 Continue's, was already queued), so its cancel found nothing: a read started now
  // would wait with no deadline at all.
  if (timed_out_) {
    OnReadError(net::error::operation_aborted);
    return;
  }
  stream_.async_read_some(buffer_.prepare(kReadChunk), [self = this->shared_from_this(), then](
                                                           beast::error_code ec, size_t n) {
    if (ec == net::error::eof) {
      ec = self->parser_->got_some() ? beast::error_code(bhttp::error::partial_message)
                                     : beast::error_code(bhttp::error::end_of_stream);
    }
    // The deadline fired after this read completed, before this ran: as above.
    if (!ec && self->timed_out_) ec = net::error::operation_aborted;
    if (ec) {
      self->OnReadError(ec);
      return;
    }
    self->buffer_.commit(n);
    ((*self).*then)();
  });
}

template <bool kTls>
void Session<kTls>::OnHeader() {
  const auto& request = parser_->get();
  if (std::optional<FramingError> error = CheckFraming(request)) {
    Reject(400, std::move(error->message), error->reason);
    return;
  }
  ReadHead(request);
  if (parser_->is_done()) {
    // No body: what it holds is bounded by max_connections x header_limit_bytes, and
    // probes, metadata and metrics stay answered while bodies fill the budget.
    OnRequest();
    return;
  }
  if (!core_.handler.BeforeBody(request_)) {
    // A caller the server does not know: answered (its refusal counted and logged as any
    // other) without a byte of its body held, and the connection closed after it, the body
    // left to the linger's drain.
    body_unread_ = true;
    OnRequest();
    return;
  }
  // Reserved before the body is read (and before 100-continue invites it), so a request
  // that does not fit is refused while the server holds nothing of its body.
  const size_t reserve = header_reader_.bytes() + size_t(parser_->content_length().value_or(0));
  if (!core_.Reserve(reserve)) {
    RejectOverBudget();
    return;
  }
  reserved_ = reserve;
  body_started_ns_ = CoarseNowNanos();
  body_bytes_ = 0;
  ArmBodyRate();
  // Not to HTTP/1.0, which has no interim answers (RFC 9110, 15.2; review helper-96).
  if (request.version() >= 11 &&
      EqualsIgnoreCase(ToStd(request[bhttp::field::expect]), "100-continue")) {
    // curl and others wait for this before sending a body over 1 KiB.
    auto continue_response =
        std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, 11);
    after_answer_ += kInterimBytes + (kTls ? kTlsRecordBytes : 0);
    bhttp::async_write(
        stream_, *continue_response,
        [self = this->shared_from_this(), continue_response](beast::error_code ec, size_t) {
          if (ec) {
            self->Close();
            return;
          }
          self->ParseBody();
        });
    return;
  }
  ParseBody();
}

template <bool kTls>
void Session<kTls>::ParseBody() {
  if (buffer_.size() > 0) {
    size_t used = 0;
    beast::error_code ec;
    const BodyReader::Result result = body_reader_.Put(*parser_, buffer_.data(), used, ec);
    buffer_.consume(used);
    body_bytes_ += used;
    ArmBodyRate();
    switch (result) {
      case BodyReader::Result::kNeedMore:
        break;
      case BodyReader::Result::kDone:
        OnRequest();
        return;
      case BodyReader::Result::kTooLarge:
        Reject(431,
               StrCat("a chunk header or the trailers exceed ", core_.limits.header_limit_bytes,
                      " bytes"),
               "header_too_large");
        return;
      case BodyReader::Result::kTooManyFields:
        Reject(431,
               StrCat("the request header and trailers have more than ",
                      core_.limits.header_fields_limit, " fields"),
               "too_many_headers");
        return;
      case BodyReader::Result::kError:
        if (ec == bhttp::error::buffer_overflow) {  // from OnChunkBody: the budget is full
          RejectOverBudget();
        } else {
          OnReadError(ec);
        }
        return;
    }
  }
  ReadMore(&Session::ParseBody);
}

template <bool kTls>
size_t Session<kTls>::OnChunkBody(beast::string_view data, beast::error_code& ec) {
  std::string& body = parser_->get().body();
  const size_t needed = body.size() + data.size();
  if (needed > body.capacity()) {
    const size_t capacity =
        std::max(needed, std::min(core_.limits.body_limit_bytes, 2 * body.capacity()));
    if (!core_.Reserve(capacity - body_charged_)) {
      ec = bhttp::error::buffer_overflow;  // ParseBody answers 503
      return 0;
    }
    reserved_ += capacity - body_charged_;
    body_charged_ = capacity;
    // reserve() on the string itself would round a growth of less than double up to double.
    std::string grown;
    grown.reserve(capacity);
    grown.append(body);
    body.swap(grown);
  }
  body.append(data.data(), data.size());
  return data.size();
}

template <bool kTls>
void Session<kTls>::ArmBodyRate() {
  const size_t rate = core_.limits.body_min_bytes_per_second;
  if (rate == 0 || waiting_ != Waiting::kRequest || timed_out_) return;
  // The request's own deadline is never extended; past it, the rate's deadline is moot.
  const absl::Duration allowed =
      std::min(core_.limits.body_min_rate_grace + absl::Seconds(double(body_bytes_) / double(rate)),
               core_.limits.request_timeout);
  const int64_t rate_deadline_ns = body_started_ns_ + absl::ToInt64Nanoseconds(allowed);
  slow_body_ = rate_deadline_ns < request_deadline_ns_;
  deadline_ns = slow_body_ ? rate_deadline_ns : request_deadline_ns_;
}

template <bool kTls>
void Session<kTls>::RejectOverBudget() {
  Reject(503, "the server holds too many request bytes; retry later", "over_budget");
}

template <bool kTls>
void Session<kTls>::OnReadError(beast::error_code ec) {
  const bool timed_out = timed_out_;
  Disarm();
  if (timed_out && slow_body_) {
    Reject(408,
           StrCat("the request body arrived slower than ", core_.limits.body_min_bytes_per_second,
                  " bytes per second"),
           "body_too_slow");
  } else if (timed_out) {
    Reject(408, "the request was not received in time", "timeout");
  } else if (ec == bhttp::error::end_of_stream) {
    Linger();  // its side ended between requests; it may still read the last answers
  } else if (ec == bhttp::error::body_limit) {
    Reject(413, StrCat("the request body exceeds ", core_.limits.body_limit_bytes, " bytes"),
           "body_too_large");
  } else if (ec == bhttp::error::header_limit) {
    Reject(431, StrCat("the request header exceeds ", core_.limits.header_limit_bytes, " bytes"),
           "header_too_large");
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
             ec != bhttp::error::partial_message) {
    Reject(400, StrCat("malformed HTTP request: ", ec.message()), "malformed");
  } else {
    // The connection broke mid-request (truncated body, reset): nobody is left to answer, but a
    // client that ended its side mid-request may still be owed the answers before it (review
    // helper-116 F1: closed at once, their bytes were the kernel's to hold, uncounted).
    listener_.Reject(core_, "truncated");
    Linger();
  }
}

template <bool kTls>
void Session<kTls>::ReadHead(const bhttp::request<bhttp::string_body>& message) {
  request_ = Request();
  body_unread_ = false;
  request_.listener = listener_.options.name;
  request_.method = std::string(ToStd(message.method_string()));
  request_.target = std::string(ToStd(message.target()));
  request_.authorization = std::string(ToStd(message[bhttp::field::authorization]));
  request_.remote = remote_;
  ReadPillarHeaders(message, request_);
  // A connection made before the listener's TLS files changed closes after this answer, its
  // client checked again first (TlsClient::Check): before the body, whose sender BeforeBody
  // judges by that client.
  same_tls_files_ = true;
  if constexpr (kTls) {
    SSL* ssl = stream_.native_handle();
    named_ns_ = SystemClock().MonotonicNanos();
    same_tls_files_ = client_.Check(ssl, listener_, core_, remote_, tls_, named_ns_);
    client_.Name(ssl, listener_, request_, named_ns_);
  }
}

template <bool kTls>
void Session<kTls>::OnRequest() {
  Disarm();
  bhttp::request<bhttp::string_body> message = parser_->release();
  Request request = std::move(request_);
  if (!body_unread_) request.body = std::move(message.body());
  request.body_unread = body_unread_;
  request.received_ns = SystemClock().MonotonicNanos();
  if constexpr (kTls) {
    // The body may have taken a while: a client whose certificate was revoked since (the
    // listener's CRLs reloaded), or whose chain ended, is named as it is now, and the caller
    // found at the header is not taken but checked again (review helper-131: a certificate
    // revoked while its client sent a slow body still ran).
    SSL* ssl = stream_.native_handle();
    const bool same = client_.Check(ssl, listener_, core_, remote_, tls_, request.received_ns);
    if (!same || !client_.NamesAlike(named_ns_, request.received_ns)) {
      if (!same) same_tls_files_ = false;
      client_.Name(ssl, listener_, request, request.received_ns);
      request.caller.reset();
    }
  }
  keep_alive_ = message.keep_alive() && same_tls_files_ && !body_unread_;
  http10_ = message.version() == 10;

  RouteResult route = listener_.router.Match(request.method, request.target);
  if (route.kind == RouteResult::Kind::kNotFound) {
    // The message does not quote the target: the access log keeps it as its path, decoded and
    // redacted there, and a message is redacted as text (a percent-encoded email quoted here
    // reached the log).
    Reject(404, "no route matches the request's path", "no_route", true, request.method,
           request.target);
    return;
  }
  if (route.kind == RouteResult::Kind::kMethodNotAllowed) {
    extra_header_ = route.allowed;
    // Not quoted: any token is a method, a key too (review helper-136); Allow says what is.
    Reject(405, "the request's method is not allowed here", "method_not_allowed", true,
           request.method, request.target);
    return;
  }
  request.route = route.route;
  request.params = std::move(route.params);
  handling_ = true;
  core_.handler.Handle(std::move(request), this->shared_from_this());
}

template <bool kTls>
void Session<kTls>::Reject(int status, std::string message, std::string_view reason,
                           bool keep_alive, std::string_view method, std::string_view target) {
  listener_.Reject(core_, reason);
  if (method.empty() && parser_ && parser_->is_header_done()) {
    method = ToStd(parser_->get().method_string());
    target = ToStd(parser_->get().target());
  }
  core_.handler.OnRejected(
      Rejection{listener_.options.name, status, reason, message, remote_, method, target});
  if (!keep_alive) keep_alive_ = false;
  Response response;
  response.status = status;
  response.body = "{\"error\":";
  AppendJsonString(response.body, message);
  response.body.push_back('}');
  if (status == 405) response.headers.emplace_back("Allow", std::move(extra_header_));
  // The budget frees as requests are answered, which takes milliseconds to seconds.
  if (status == 503) response.headers.emplace_back("Retry-After", "1");
  Write(std::move(response));
}

template <bool kTls>
void Session<kTls>::OnWatch() {
  if (!on_gone_) {
    watch_from_ns = 0;
    return;
  }
  // The peer's end of the stream (or a reset), seen without reading.
  const int fd = Socket().native_handle();
  pollfd watched{fd, POLLRDHUP, 0};
  if (::poll(&watched, 1, 0) <= 0) return;
  if ((watched.revents & (POLLHUP | POLLERR)) == 0) {
    if ((watched.revents & POLLRDHUP) == 0) return;
    // An end of the client's side is a close, or a half-close by a client that still waits for
    // its answers (one that pipelined, or that shuts its side once it has sent: review helpers
    // 94 and 95 found both dropped), which TCP tells apart only once the server writes. A
    // plaintext HTTP/1.1 client is written an interim 100 (Continue), which every HTTP/1.1 client
    // must take and may ignore (RFC 9110, 15.2): a closed socket answers it with a reset, which
    // the next sweep sees; a half-closed one takes it and waits on. Over TLS (a write goes
    // through the session's stream) and to HTTP/1.0 (no interim answers), an end is taken as
    // gone, as nginx takes it.
    // Written again each second while the end stands: a client that took one and closed after
    // it sends nothing more (review helper-96), and the next one draws its reset.
    if constexpr (!kTls) {
      if (!http10_) {
        const int64_t now = CoarseNowNanos();
        if (probed_ns_ != 0 && now - probed_ns_ < kProbeEveryNs) return;  // still there
        probed_ns_ = now;
        static constexpr std::string_view kProbe = "HTTP/1.1 100 Continue\r\n\r\n";
        const ssize_t sent = ::send(fd, kProbe.data(), kProbe.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent > 0) after_answer_ += uint64_t(sent);
        if (sent == ssize_t(kProbe.size())) return;
      }
    }
  }
  watch_from_ns = 0;
  keep_alive_ = false;  // nothing more comes on it
  absl::AnyInvocable<void()&&> gone = std::move(on_gone_);
  on_gone_ = nullptr;
  std::move(gone)();
}

template <bool kTls>
void Session<kTls>::BuildHead(const Response& response, bool streamed) {
  handling_ = false;  // the answer starts: nothing left to stop
  on_gone_ = nullptr;
  watch_from_ns = 0;
  core_.Release(reserved_);
  reserved_ = 0;
  body_charged_ = 0;
  response_keep_alive_ =
      keep_alive_ && !(streamed && http10_) && !core_.draining.load(std::memory_order_relaxed);
  head_.clear();
  cut_told_ = false;
  after_answer_ = 0;
  AppendResponseHead(response, {streamed, response_keep_alive_, http10_}, head_);
}

template <bool kTls>
void Session<kTls>::Write(Response response) {
  BuildHead(response, false);
  body_ = std::move(response.body);
  Arm(Waiting::kWrite, core_.limits.write_timeout);
  core_.writing.fetch_add(1);
  std::array<net::const_buffer, 2> buffers = {net::buffer(head_), net::buffer(body_)};
  // What the answer holds joins held_ once it is written: until then its bytes are this
  // process's, and what the socket holds says nothing of them (review helper-137: a fetch written
  // on a connection already holding an answer was counted at the socket's 26 KB of 7.5 MB).
  net::async_write(stream_, buffers,
                   [self = this->shared_from_this(), held = std::move(response.held)](
                       beast::error_code ec, size_t sent) mutable {
                     self->core_.writing.fetch_sub(1);
                     self->Disarm();
                     if (held) self->held_.push_back(std::move(held));
                     if (ec) {
                       const size_t size = self->head_.size() + self->body_.size();
                       self->AnswerCut(self->timed_out_                      ? "write_timeout"
                                       : ec == net::error::operation_aborted ? "stopped"
                                                                             : "client_gone",
                                       size - std::min(sent, size));
                       std::string().swap(self->body_);  // not held through the linger either
                       // Timed out: cut here, what was written before may still be read.
                       self->timed_out_ ? self->Linger() : self->Close();
                       self->HoldUntilTaken();
                       return;
                     }
                     // Let go once written, not kept until the next answer takes its place (a
                     // kept-alive connection may wait a minute for one: review helper-133).
                     std::string().swap(self->body_);
                     self->HoldUntilTaken();
                     self->Answered();
                   });
}

template <bool kTls>
void Session<kTls>::HoldUntilTaken() {
  if (held_.empty()) return;
  holding = true;
  OnHolding();
}

template <bool kTls>
void Session<kTls>::OnHolding() {
  if (Socket().is_open() && !Delivered()) {
    // What the socket still holds bounds what is left of each answer (of the last one, and of
    // any before it that it holds the rest of too).
    const uint64_t undelivered = Unacknowledged();
    for (const std::shared_ptr<HeldBytes>& held : held_) held->Undelivered(undelivered);
    return;  // the next sweep looks again
  }
  held_.clear();
  holding = false;
}

template <bool kTls>
void Session<kTls>::Answered() {
  if (!response_keep_alive_) {
    Shutdown();
    return;
  }
  WaitForRequest();
}

template class Session<false>;
template class Session<true>;

}  // namespace pillar::http::internal
