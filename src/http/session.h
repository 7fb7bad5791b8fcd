// Internal to src/http: one client connection (plain or TLS) and the per-thread event loop it
// lives on. Included only by server.cc (and the request fuzzer, for HeaderReader); the public
// door of the part is server.h.
//
// A Session reads a request under the limits, answers protocol errors itself, hands good
// requests to the Handler, and writes the answer; deadlines are checked by its Loop's sweep.
// It drives Beast's parser itself (read, put, count) instead of bhttp::async_read, so that every
// byte of a header and of a chunked body's framing is counted (HeaderReader, BodyReader) and a
// body is charged to the server-wide in-flight budget (Core::Reserve) before it is held.
// All of a session's handlers run on its loop's single thread; Send() and Post() may be called
// from any thread and hop onto it.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> under C++20.
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "http/peer_identity.h"
#include "http/server.h"

namespace pillar::http::internal {

namespace net = boost::asio;

// Beast's string_view is boost::string_view; pillar's helpers take std::string_view.
template <typename BoostView>
std::string_view ToStd(BoostView view) {
  return std::string_view(view.data(), view.size());
}

namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

// Every read, header or body. The parser consumes a body as it arrives and holds back less than
// header_limit_bytes of a header, or of a chunk-size line or trailers (and the CRLF before it),
// so a connection's read buffer never grows past header_limit_bytes + 2 + kReadChunk.
constexpr size_t kReadChunk = 16 * 1024;

using RequestParser = bhttp::request_parser<bhttp::string_body>;

// Feeds a request header to the parser under the limits, counting every byte the parser
// consumes and every field it has parsed. Beast's own header_limit is compared only with the
// bytes one put() has not parsed yet, and a caller discards the parsed ones: a client whose
// every write ended one byte into the next field name sent 40 MiB of header past a 16 KiB
// limit, and nothing capped the number of fields. Plain data, no I/O, so the request fuzzer
// drives it with the same reads split as the attack.
//
//   HeaderReader reader(limits.header_limit_bytes, limits.header_fields_limit);
//   for each read: result = reader.Put(parser, buffer.data(), used, ec); buffer.consume(used);
class HeaderReader {
 public:
  enum class Result {
    kNeedMore,       // the header has not ended: read more, then Put() again
    kDone,           // the parser's header is complete
    kTooLarge,       // the header exceeds the byte limit: 431
    kTooManyFields,  // the header has more fields than the field limit: 431
    kError,          // `ec` says what Beast refused (malformed, body_limit ...)
  };

  HeaderReader(size_t byte_limit, size_t field_limit)
      : byte_limit_(byte_limit), field_limit_(field_limit) {}

  // `input` is everything buffered and not consumed yet; `used` is how much of it the parser
  // consumed (to drop from the buffer). Only called while the header is not complete.
  [[nodiscard]] Result Put(RequestParser& parser, net::const_buffer input, size_t& used,
                           beast::error_code& ec) {
    // The parser gets only what is left of the limit, so one put() cannot take more.
    const size_t left = bytes_ < byte_limit_ ? byte_limit_ - bytes_ : 0;
    parser.header_limit(static_cast<uint32_t>(std::min<size_t>(left, UINT32_MAX)));
    used = parser.put(input, ec);
    bytes_ += used;
    if (used > 0) {
      // Only consuming bytes adds fields, so the list (at most field_limit_ long until the
      // last put) is walked once per put that parsed some.
      const auto& fields = parser.get();
      fields_ = size_t(std::distance(fields.begin(), fields.end()));
      if (fields_ > field_limit_) return Result::kTooManyFields;
    }
    // A start line and the fields after it are each held to the parser's limit within one
    // put(), so together they can pass it.
    if (bytes_ > byte_limit_) return Result::kTooLarge;
    if (ec == bhttp::error::need_more) {
      ec = {};
      // What is left unconsumed is the start of a header that has not ended yet, so the header
      // will be longer than that.
      if (bytes_ + (input.size() - used) >= byte_limit_) return Result::kTooLarge;
      return Result::kNeedMore;
    }
    if (ec == bhttp::error::header_limit) return Result::kTooLarge;
    if (ec) return Result::kError;
    return Result::kDone;
  }

  size_t bytes() const { return bytes_; }    // consumed for the header so far
  size_t fields() const { return fields_; }  // parsed so far

 private:
  size_t byte_limit_;
  size_t field_limit_;
  size_t bytes_ = 0;
  size_t fields_ = 0;
};

// Feeds a request body to the parser once its header is complete, holding a chunked body's
// framing to the header's limits: each chunk-size line (size, extensions, CRLF) and the trailer
// section (the last chunk's line, the trailer fields, the blank line) is at most `byte_limit`
// bytes, and the trailers count toward the header's `field_limit`. Beast consumes such a line
// only once it has all of it, and puts no limit on it; a check of what stayed buffered between
// reads let one read complete a line of twice the limit (a 32,500-byte extension or trailer
// passed a 16 KiB limit). So the parser takes one step per put() (a line, or a piece of a chunk)
// and is given at most byte_limit bytes past the CRLF that ends the previous chunk: a line that
// has not ended within them is over the limit, however the client split its writes. Plain data,
// no I/O, so the request fuzzer drives it with the same reads split as an attack.
//
// Trailer fields are dropped once the body ends. Beast appends them to the header's fields,
// where they would be read as headers that every check made at the end of the header missed:
// an Authorization sent after the body (past a proxy that strips or checks credentials in the
// header), a second Host or Authorization past the singleton check. RFC 9110 6.5.1 lets a
// recipient discard trailers, and pillar gives none of them a meaning.
//
//   BodyReader reader(limits.header_limit_bytes, limits.header_fields_limit);
//   for each read: result = reader.Put(parser, buffer.data(), used, ec); buffer.consume(used);
class BodyReader {
 public:
  enum class Result {
    kNeedMore,       // the body has not ended: read more, then Put() again
    kDone,           // the parser's message is complete
    kTooLarge,       // a chunk-size line or the trailer section exceeds the byte limit: 431
    kTooManyFields,  // the header and trailers have more fields than the field limit: 431
    kError,          // `ec` says what Beast or the parser's body callback refused
  };

  BodyReader(size_t byte_limit, size_t field_limit)
      : byte_limit_(byte_limit), field_limit_(field_limit) {}

  // `input` is everything buffered and not consumed yet; `used` is how much of it the parser
  // consumed (to drop from the buffer). Only called once the header is complete, while the
  // message is not.
  [[nodiscard]] Result Put(RequestParser& parser, net::const_buffer input, size_t& used,
                           beast::error_code& ec) {
    used = 0;
    ec = {};
    if (!started_ && parser.chunked() && !header_) {
      // Beast files a trailer next to the header field of the same name, so the header's
      // fields cannot be told from the trailers by position afterwards: keep a copy.
      header_fields_ = FieldCount(parser);
      header_.emplace(parser.get().base());
    }
    // Beast's eager mode would run on through every chunk the input holds; one step per put()
    // lets each line be given no more than its limit.
    parser.eager(false);
    const char* data = static_cast<const char*>(input.data());
    while (used < input.size() && !parser.is_done()) {
      // What one step may be given: for a Content-Length body, all of it.
      size_t most = SIZE_MAX;
      if (parser.chunked()) {
        // Beast reads the CRLF that ends a chunk's data as the start of the next chunk-size
        // line. Pieces of chunk data are given as much, and simply take several steps.
        most = (started_ ? 2 : 0) + byte_limit_;
      }
      const size_t allowed = std::min(input.size() - used, most);
      const size_t n = parser.put(net::const_buffer(data + used, allowed), ec);
      used += n;
      started_ = started_ || n > 0;
      if (ec == bhttp::error::need_more) {
        // Only a line (a chunk-size line or the trailer section) leaves input unconsumed, and
        // only while its end is not in what it was given.
        ec = {};
        return allowed < most ? Result::kNeedMore : Result::kTooLarge;
      }
      if (ec) return Result::kError;
      if (n == 0) return Result::kNeedMore;  // a step that took nothing waits for more
    }
    if (!parser.is_done()) return Result::kNeedMore;
    if (parser.chunked()) {
      // The header's fields and the trailers.
      const size_t fields = FieldCount(parser);
      if (fields > field_limit_) return Result::kTooManyFields;
      if (header_ && fields != header_fields_) parser.get().base() = std::move(*header_);
    }
    return Result::kDone;
  }

 private:
  static size_t FieldCount(RequestParser& parser) {
    const auto& fields = parser.get();
    return size_t(std::distance(fields.begin(), fields.end()));
  }

  size_t byte_limit_;
  size_t field_limit_;
  // A chunked request's header as it ended, and its number of fields.
  std::optional<bhttp::request_header<>> header_;
  size_t header_fields_ = 0;
  bool started_ = false;  // the parser has consumed some of the body
};

// Headers that must appear at most once: a second copy is either an attack (request smuggling,
// credential confusion) or a broken client, and either way the request is ambiguous.
constexpr bhttp::field kSingletonHeaders[] = {
    bhttp::field::authorization, bhttp::field::content_length,    bhttp::field::content_type,
    bhttp::field::host,          bhttp::field::transfer_encoding,
};

// Whether a request's Transfer-Encoding value frames a body pillar can read: exactly one
// `chunked` (any case, optional whitespace), since pillar decodes no other transfer coding.
// Beast sets a body's framing only when `chunked` is the last coding, and reads every other
// value (`gzip`, `chunked, gzip`, `chunked, chunked`) as no body at all, so the body's bytes
// would be parsed as the next request on the connection (smuggled past whatever sits in front).
// RFC 9112 6.3: a request whose final coding is not chunked gets 400 and its connection closed;
// `gzip, chunked` is framed right but pillar cannot decode it, so it gets the same.
inline bool IsChunkedOnly(std::string_view value) {
  const size_t first = value.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  value = value.substr(first, value.find_last_not_of(" \t") + 1 - first);
  return EqualsIgnoreCase(value, "chunked");
}

struct Stats {
  monitor::Family<monitor::Counter>* rejected = nullptr;
  monitor::Family<monitor::Gauge>* open = nullptr;
  monitor::Family<monitor::Counter>* accepted = nullptr;
  monitor::Gauge* inflight_bytes = nullptr;
};

struct Core {
  Limits limits;
  Handler& handler;
  Stats stats;
  std::atomic<bool> draining{false};
  std::atomic<size_t> connections{0};
  std::atomic<int64_t> writing{0};
  // Bytes reserved by requests read but not answered yet (Limits::inflight_bytes_limit).
  std::atomic<size_t> inflight_bytes{0};

  // Takes `bytes` from the in-flight budget; false, taking nothing, when they do not fit.
  [[nodiscard]] bool Reserve(size_t bytes) {
    const size_t limit = limits.inflight_bytes_limit;
    size_t held = inflight_bytes.load(std::memory_order_relaxed);
    do {
      if (bytes > limit || held > limit - bytes) return false;
    } while (!inflight_bytes.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    if (stats.inflight_bytes) stats.inflight_bytes->Add(double(bytes));
    return true;
  }

  void Release(size_t bytes) {
    if (bytes == 0) return;
    inflight_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    if (stats.inflight_bytes) stats.inflight_bytes->Add(-double(bytes));
  }
};

struct Listener {
  ListenerOptions options;
  const Router& router;
  std::unique_ptr<ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;
  monitor::Counter* accepted = nullptr;
  monitor::Gauge* open = nullptr;

  void Reject(Core& core, std::string_view reason) const {
    if (core.stats.rejected) core.stats.rejected->Get({options.name, reason}).Increment();
  }
};

// What a connection waits for, and until when. Deadlines are checked by a sweep that runs on
// each loop every kSweepInterval instead of a timer per wait: arming and cancelling a timer
// twice per request cost more than the rest of a cheap request.
class Deadlined {
 public:
  virtual ~Deadlined() = default;
  virtual void OnDeadline() = 0;
  int64_t deadline_ns = 0;  // 0: nothing to wait for
};

constexpr auto kSweepInterval = std::chrono::milliseconds(100);

// Deadlines are checked every 100 ms, so the coarse clock (a memory read, no TSC) is precise
// enough and costs far less than the exact one.
inline int64_t CoarseNowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Loop {
  Loop() : sweep(context) {}
  net::io_context context{1};
  net::steady_timer sweep;
  // Every session on this loop; expired entries are dropped by the sweep. Loop thread only.
  std::vector<std::weak_ptr<Deadlined>> sessions;

  void Sweep() {
    const int64_t now = CoarseNowNanos();
    size_t kept = 0;
    for (size_t i = 0; i < sessions.size(); ++i) {
      std::shared_ptr<Deadlined> session = sessions[i].lock();
      if (!session) continue;
      sessions[kept++] = sessions[i];
      if (session->deadline_ns != 0 && now >= session->deadline_ns) {
        session->deadline_ns = 0;
        session->OnDeadline();
      }
    }
    sessions.resize(kept);
    sweep.expires_after(kSweepInterval);
    sweep.async_wait([this](beast::error_code ec) {
      if (!ec) Sweep();
    });
  }
};

template <bool kTls>
class Session final : public ResponseSink,
                      public Deadlined,
                      public std::enable_shared_from_this<Session<kTls>> {
  using Stream = std::conditional_t<kTls, ssl::stream<tcp::socket>, tcp::socket>;

 public:
  Session(tcp::socket&& socket, Core& core, Listener& listener, Loop& loop)
      : stream_(MakeStream(std::move(socket), listener)),
        core_(core),
        listener_(listener),
        loop_(loop) {
    ++core_.connections;
    if (listener_.open) listener_.open->Add(1);
  }

  ~Session() override {
    core_.Release(reserved_);  // the connection went away before its request was answered
    --core_.connections;
    if (listener_.open) listener_.open->Add(-1);
  }

  void Run() {
    beast::error_code ec;
    tcp::endpoint peer = Socket().remote_endpoint(ec);
    if (!ec) remote_ = StrCat(peer.address().to_string(), ":", peer.port());
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Begin(); });
  }

  void Send(Response response) override {
    net::dispatch(stream_.get_executor(),
                  [self = this->shared_from_this(), response = std::move(response)]() mutable {
                    self->Write(std::move(response));
                  });
  }

  void Post(absl::AnyInvocable<void() &&> task) override {
    net::post(stream_.get_executor(), [self = this->shared_from_this(),
                                       task = std::move(task)]() mutable { std::move(task)(); });
  }

 private:
  enum class Waiting { kNothing, kIdle, kRequest, kHandshake, kWrite, kShutdown };

  static Stream MakeStream(tcp::socket&& socket, Listener& listener) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *listener.tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  tcp::socket& Socket() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // One deadline for whatever the session is waiting for. On expiry the socket's pending
  // operation is cancelled (not the socket closed), so a slow request can still get its 408.
  void Arm(Waiting what, absl::Duration after) {
    waiting_ = what;
    timed_out_ = false;
    slow_body_ = false;
    deadline_ns = CoarseNowNanos() + absl::ToInt64Nanoseconds(after);
    request_deadline_ns_ = deadline_ns;
  }

  void Disarm() {
    waiting_ = Waiting::kNothing;
    deadline_ns = 0;
  }

  void OnDeadline() override {
    beast::error_code ignored;
    if (waiting_ == Waiting::kRequest) {
      timed_out_ = true;
      Socket().cancel(ignored);
    } else {
      Socket().close(ignored);  // idle, handshake, write, shutdown: nobody to answer
    }
  }

  void Begin() {
    loop_.sessions.push_back(this->weak_from_this());
    if constexpr (kTls) {
      Arm(Waiting::kHandshake, core_.limits.tls_handshake_timeout);
      stream_.async_handshake(
          ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
            self->Disarm();
            if (ec) {
              self->listener_.Reject(self->core_, "tls_handshake");
              self->Close();
              return;
            }
            self->peer_identity_ = PeerIdentity(self->stream_.native_handle(),
                                                self->listener_.options.client_identity);
            self->WaitForRequest();
          });
    } else {
      WaitForRequest();
    }
  }

  void WaitForRequest() {
    parser_.emplace();
    parser_->body_limit(core_.limits.body_limit_bytes);
    parser_->on_chunk_body(chunk_body_sink_);
    body_charged_ = 0;
    header_reader_ =
        HeaderReader(core_.limits.header_limit_bytes, core_.limits.header_fields_limit);
    body_reader_ = BodyReader(core_.limits.header_limit_bytes, core_.limits.header_fields_limit);
    if (buffer_.size() > 0) {
      Arm(Waiting::kRequest, core_.limits.request_timeout);
      ParseHeader();
      return;
    }
    Arm(Waiting::kIdle, core_.limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->Disarm();
                              if (ec) {
                                // Idle timeout or the peer went away between requests:
                                // nothing was asked, so nothing is answered.
                                self->Close();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->Arm(Waiting::kRequest, self->core_.limits.request_timeout);
                              self->ParseHeader();
                            });
  }

  // Parses what the buffer holds and reads more until the header is complete. The parser
  // stops at the end of the header, so the body and pipelined requests stay in the buffer.
  void ParseHeader() {
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

  // Reads what the peer sends next into the buffer, then calls `then`. A failed read (the peer
  // went away, the request deadline cancelled it) goes to OnReadError as Beast reports it.
  void ReadMore(void (Session::*then)()) {
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

  void OnHeader() {
    const auto& request = parser_->get();
    for (bhttp::field field : kSingletonHeaders) {
      auto range = request.equal_range(field);
      if (range.first != range.second && std::next(range.first) != range.second) {
        Reject(400, StrCat("duplicate header '", ToStd(bhttp::to_string(field)), "'"),
               "duplicate_header");
        return;
      }
    }
    // Checked before is_done(): Beast reads a body of any other coding as no body, and what
    // follows the header must never be read as a request (Content-Length along with it is
    // refused by Beast already).
    if (auto te = request.find(bhttp::field::transfer_encoding); te != request.end()) {
      // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing (an HTTP/1.0
      // hop in front may frame the body otherwise). Beast decodes it and keeps the connection
      // alive; pillar has no HTTP/1.0 clients that chunk, so it refuses the request and closes.
      if (request.version() < 11) {
        Reject(400, "Transfer-Encoding in an HTTP/1.0 request", "unsupported_transfer_encoding");
        return;
      }
      if (!IsChunkedOnly(ToStd(te->value()))) {
        Reject(400, "unsupported Transfer-Encoding: pillar accepts only chunked",
               "unsupported_transfer_encoding");
        return;
      }
    }
    if (parser_->is_done()) {
      // No body: what it holds is bounded by max_connections x header_limit_bytes, and
      // probes, metadata and metrics stay answered while bodies fill the budget.
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
    if (EqualsIgnoreCase(ToStd(request[bhttp::field::expect]), "100-continue")) {
      // curl and others wait for this before sending a body over 1 KiB.
      auto continue_response =
          std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, 11);
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

  // Parses what the buffer holds and reads more until the body is complete. The parser stops
  // at the end of the body, so pipelined requests stay in the buffer.
  void ParseBody() {
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

  // A chunked body declares no size, so it is charged as its payload is kept, before the memory
  // is taken, and only for that: the parser drops chunk-size lines and extensions as it goes
  // (each bounded by header_limit_bytes: BodyReader), and trailers are fields, bounded with
  // the header. Beast's string_body would append the payload with std::string's growth, which
  // allocates before anyone could charge it and can reach twice body_limit_bytes; this grows
  // the string the same way (doubling, so a body of 1-byte chunks is not copied once per
  // chunk) but never past body_limit_bytes, and charges its capacity: what the server holds.
  // Beast refuses a chunk that would pass body_limit_bytes before its payload arrives.
  size_t OnChunkBody(beast::string_view data, beast::error_code& ec) {
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

  // Called by the parser for each piece of chunk payload, in place of string_body's reader.
  struct ChunkBodySink {
    Session* session;
    size_t operator()(uint64_t /*remain*/, beast::string_view data, beast::error_code& ec) {
      return session->OnChunkBody(data, ec);
    }
  };

  // A body holds its reservation while it is read: past the grace, it must have brought
  // body_min_bytes_per_second for every second since its header (Limits), or the deadline
  // fires and it gets 408. Bytes the parser consumed count, framing included: a chunked body's
  // reservation grows only with its payload, so framing keeps alive a connection that holds
  // little. Called when the body starts and after every read of it.
  void ArmBodyRate() {
    const size_t rate = core_.limits.body_min_bytes_per_second;
    if (rate == 0 || waiting_ != Waiting::kRequest || timed_out_) return;
    // The request's own deadline is never extended; past it, the rate's deadline is moot.
    const absl::Duration allowed = std::min(
        core_.limits.body_min_rate_grace + absl::Seconds(double(body_bytes_) / double(rate)),
        core_.limits.request_timeout);
    const int64_t rate_deadline_ns = body_started_ns_ + absl::ToInt64Nanoseconds(allowed);
    slow_body_ = rate_deadline_ns < request_deadline_ns_;
    deadline_ns = slow_body_ ? rate_deadline_ns : request_deadline_ns_;
  }

  void RejectOverBudget() {
    Reject(503, "the server holds too many request bytes; retry later", "over_budget");
  }

  void OnReadError(beast::error_code ec) {
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
      Close();
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
      // The connection broke mid-request (truncated body, reset): nobody is left to answer.
      listener_.Reject(core_, "truncated");
      Close();
    }
  }

  void OnRequest() {
    Disarm();
    bhttp::request<bhttp::string_body> message = parser_->release();
    Request request;
    request.listener = listener_.options.name;
    request.method = std::string(ToStd(message.method_string()));
    request.target = std::string(ToStd(message.target()));
    request.authorization = std::string(ToStd(message[bhttp::field::authorization]));
    request.body = std::move(message.body());
    request.remote = remote_;
    request.peer_identity = peer_identity_;
    request.received_ns = SystemClock().MonotonicNanos();
    keep_alive_ = message.keep_alive();
    http10_ = message.version() == 10;

    RouteResult route = listener_.router.Match(request.method, request.target);
    if (route.kind == RouteResult::Kind::kNotFound) {
      Reject(404, StrCat("no route for ", request.target.substr(0, 256)), "no_route", true,
             request.method, request.target);
      return;
    }
    if (route.kind == RouteResult::Kind::kMethodNotAllowed) {
      extra_header_ = route.allowed;
      Reject(405, StrCat("method ", request.method, " is not allowed here"), "method_not_allowed",
             true, request.method, request.target);
      return;
    }
    request.route = route.route;
    request.params = std::move(route.params);
    core_.handler.Handle(std::move(request), this->shared_from_this());
  }

  void Reject(int status, std::string message, std::string_view reason, bool keep_alive = false,
              std::string_view method = {}, std::string_view target = {}) {
    listener_.Reject(core_, reason);
    if (method.empty() && parser_ && parser_->is_header_done()) {
      method = ToStd(parser_->get().method_string());
      target = ToStd(parser_->get().target());
    }
    core_.handler.OnRejected(Rejection{listener_.options.name, status, reason, message, remote_,
                                       method, target.substr(0, 1024)});
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

  // Serializes the response head by hand: pillar's responses are a status line, a handful of
  // headers and a sized body, and Beast's generic serializer cost more than the rest of a cheap
  // request. Header values come from pillar's own code; CR and LF are dropped all the same.
  void Write(Response response) {
    // The request is answered: what it held goes back to the budget.
    core_.Release(reserved_);
    reserved_ = 0;
    body_charged_ = 0;
    response_keep_alive_ = keep_alive_ && !core_.draining.load(std::memory_order_relaxed);
    head_.clear();
    head_.append("HTTP/1.1 ");
    StrAppend(&head_, response.status, " ",
              ToStd(bhttp::obsolete_reason(bhttp::int_to_status(unsigned(response.status)))),
              "\r\nServer: pillar\r\nContent-Type: ");
    AppendHeaderValue(response.content_type);
    StrAppend(&head_, "\r\nContent-Length: ", response.body.size(), "\r\n");
    for (const auto& [name, value] : response.headers) {
      AppendHeaderValue(name);
      head_.append(": ");
      AppendHeaderValue(value);
      head_.append("\r\n");
    }
    if (!response_keep_alive_) {
      head_.append("Connection: close\r\n");
    } else if (http10_) {
      head_.append("Connection: keep-alive\r\n");
    }
    head_.append("\r\n");
    body_ = std::move(response.body);
    Arm(Waiting::kWrite, core_.limits.write_timeout);
    core_.writing.fetch_add(1);
    std::array<net::const_buffer, 2> buffers = {net::buffer(head_), net::buffer(body_)};
    net::async_write(stream_, buffers,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->core_.writing.fetch_sub(1);
                       self->Disarm();
                       if (ec) {
                         self->Close();
                         return;
                       }
                       if (!self->response_keep_alive_) {
                         self->Shutdown();
                         return;
                       }
                       self->WaitForRequest();
                     });
  }

  void AppendHeaderValue(std::string_view value) {
    for (char c : value) {
      if (c != '\r' && c != '\n') head_.push_back(c);
    }
  }

  void Shutdown() {
    if constexpr (kTls) {
      Arm(Waiting::kShutdown, absl::Seconds(2));
      stream_.async_shutdown(
          [self = this->shared_from_this()](beast::error_code) { self->Close(); });
    } else {
      beast::error_code ignored;
      Socket().shutdown(tcp::socket::shutdown_send, ignored);
      Close();
    }
  }

  void Close() {
    Disarm();
    beast::error_code ignored;
    Socket().close(ignored);
  }

  Stream stream_;
  Core& core_;
  Listener& listener_;
  Loop& loop_;
  Waiting waiting_ = Waiting::kNothing;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  HeaderReader header_reader_{0, 0};
  BodyReader body_reader_{0, 0};
  // Taken from the in-flight budget by the request being served.
  size_t reserved_ = 0;
  // Of reserved_, what the chunked body's string has been charged (OnChunkBody).
  size_t body_charged_ = 0;
  ChunkBodySink chunk_body_sink_{this};
  // ArmBodyRate: when the body's reading began, how much of it the parser has consumed, the
  // request's own deadline, and whether the deadline armed is the rate's.
  int64_t body_started_ns_ = 0;
  uint64_t body_bytes_ = 0;
  int64_t request_deadline_ns_ = 0;
  bool slow_body_ = false;
  std::string head_;  // the response being written: head and body
  std::string body_;
  bool response_keep_alive_ = true;
  bool keep_alive_ = true;
  bool http10_ = false;
  std::string remote_;
  std::string peer_identity_;  // from the client certificate, fixed for the connection
  std::string extra_header_;
};

}  // namespace pillar::http::internal
