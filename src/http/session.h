// Internal to src/http: one client connection (plain or TLS) and the per-thread event loop it
// lives on. Included only by server.cc; the public door of the part is server.h.
//
// A Session reads a request under the limits, answers protocol errors itself, hands good
// requests to the Handler, and writes the answer; deadlines are checked by its Loop's sweep.
// All of a session's handlers run on its loop's single thread; Send() and Post() may be called
// from any thread and hop onto it.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> under C++20.
#include <time.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
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

constexpr size_t kReadChunk = 16 * 1024;

// Headers that must appear at most once: a second copy is either an attack (request smuggling,
// credential confusion) or a broken client, and either way the request is ambiguous.
constexpr bhttp::field kSingletonHeaders[] = {
    bhttp::field::authorization, bhttp::field::content_length,    bhttp::field::content_type,
    bhttp::field::host,          bhttp::field::transfer_encoding,
};

struct Stats {
  monitor::Family<monitor::Counter>* rejected = nullptr;
  monitor::Family<monitor::Gauge>* open = nullptr;
  monitor::Family<monitor::Counter>* accepted = nullptr;
};

struct Core {
  Limits limits;
  Handler& handler;
  Stats stats;
  std::atomic<bool> draining{false};
  std::atomic<size_t> connections{0};
  std::atomic<int64_t> writing{0};
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
    deadline_ns = CoarseNowNanos() + absl::ToInt64Nanoseconds(after);
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
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                self->Disarm();
                                if (ec) {
                                  self->listener_.Reject(self->core_, "tls_handshake");
                                  self->Close();
                                  return;
                                }
                                self->peer_identity_ = PeerIdentity(
                                    self->stream_.native_handle(),
                                    self->listener_.options.client_identity);
                                self->WaitForRequest();
                              });
    } else {
      WaitForRequest();
    }
  }

  void WaitForRequest() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(core_.limits.header_limit_bytes));
    parser_->body_limit(core_.limits.body_limit_bytes);
    if (buffer_.size() > 0) {
      ReadHeader();
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
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    Arm(Waiting::kRequest, core_.limits.request_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) {
                                 self->OnReadError(ec);
                                 return;
                               }
                               self->OnHeader();
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
    if (parser_->is_done()) {
      OnRequest();
      return;
    }
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
            self->ReadBody();
          });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) {
                          self->OnReadError(ec);
                          return;
                        }
                        self->OnRequest();
                      });
  }

  void OnReadError(beast::error_code ec) {
    const bool timed_out = timed_out_;
    Disarm();
    if (timed_out) {
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
    Write(std::move(response));
  }

  // Serializes the response head by hand: pillar's responses are a status line, a handful of
  // headers and a sized body, and Beast's generic serializer cost more than the rest of a cheap
  // request. Header values come from pillar's own code; CR and LF are dropped all the same.
  void Write(Response response) {
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
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
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
