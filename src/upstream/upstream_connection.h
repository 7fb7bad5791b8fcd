// One kept-alive HTTP/1.1 connection to an upstream endpoint, plain or TLS, driven on the
// io_context it was connected on (one thread: no locks).
//
//   Connect(io, endpoint, tls, deadline, [](absl::StatusOr<std::shared_ptr<UpstreamConnection>> c)
//   {
//     auto request = std::make_shared<UpstreamRequest>();
//     request->head = RequestHead("GET", "/v2/health/ready", endpoint.host_header, {}, 0);
//     (*c)->Call(request, deadline, max_body_bytes,
//                [](absl::StatusOr<UpstreamReply> reply, CallFailure) { ... });
//   });
// Every step has the deadline it is given: a connect, handshake, write or read still running at
// the deadline is cut off, and the connection closed, so an upstream that hangs or drips holds
// nothing past it. A reply over `max_body_bytes` ends the call with an error and the connection.
//
// The request is written as pillar built it, head and body in one gather write, and a call
// arms one timer: this is the proxy's hot path, where Beast's serializer and its per-operation
// timers of tcp_stream cost more than the rest of the gateway's work on a reply.
//
// A plain connection reads by readiness: it keeps a wait for the socket to become readable
// queued at all times, armed right after each read that emptied the socket, and reads with a
// non-blocking recv only once the wait fired. Asio's reads try the socket first and, on
// loopback, the reply is never there yet: that failed recv, and the MSG_PEEK with which a reused
// connection was checked for a close, were two of the proxy's seven system calls per request.
// The standing wait also sees an upstream's close while the connection is idle, which closes it
// there and then. (TLS connections read through Beast, which reads through OpenSSL.)
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "upstream/endpoint.h"

namespace pillar::upstream {

using Clock = std::chrono::steady_clock;

// A request as it goes on the wire: its head (request line and fields, through the empty line)
// and its body, a view of bytes the caller keeps alive for the call: one encoding serves every
// attempt.
struct UpstreamRequest {
  std::string head;
  std::string_view body;
  // Whether the request may be sent again after a reused connection failed before any reply
  // byte (an idempotent model's). When it may not, a reused plain connection is also checked
  // with a system call for a close its loop has not seen yet, before anything is written.
  bool resend_safe = true;
};

// The head of an HTTP/1.1 request: the request line, Host, `fields` (those with a value), and
// Content-Length (for a GET only when it has a body). No value may hold CR, LF or NUL: endpoints
// (ParseEndpoint), tokens (ReadToken) and paths are checked where they are read.
std::string RequestHead(std::string_view method, std::string_view target, std::string_view host,
                        std::initializer_list<std::pair<std::string_view, std::string_view>> fields,
                        size_t body_bytes);

struct UpstreamReply {
  int status = 0;
  std::string body;
  std::optional<int64_t> retry_after_s;  // a Retry-After in seconds, when the reply had one
  bool shed_for_deadline = false;        // X-Pillar-Shed: deadline (runtime/admission.h)
};

// Takes a streamed reply's body (the body of a 200 to a call given a sink) as it arrives: each
// piece once, in order, on the connection's loop. The connection reads on only once `more(true)`
// runs (on any thread: it hops to the connection's loop); more(false) stops the call (its
// callback gets an error, the connection closes). So a reply is held one piece at a time, at the
// pace of whoever takes it.
class BodySink {
 public:
  virtual ~BodySink() = default;
  virtual void OnBody(std::string piece, absl::AnyInvocable<void(bool) &&> more) = 0;
};

// How a call failed, for the caller's choice of retrying: a stale kept-alive connection that
// the upstream had closed fails before any reply byte, which is safe to send again at once; one
// found stale before the request was written (kNotSent) is safe to send again for any model.
enum class CallFailure { kNone, kNotSent, kBeforeReply, kDuringReply, kDeadline };

class UpstreamConnection {
 public:
  using ReplyCallback = absl::AnyInvocable<void(absl::StatusOr<UpstreamReply>, CallFailure) &&>;

  virtual ~UpstreamConnection() = default;
  // Writes `request` and reads the reply. The connection stays open for another call only when
  // this one succeeded and both sides keep it alive; open() says so afterwards. On a connection
  // that carried a call before, Idle() is checked first: one that is not idle fails the call
  // with kNotSent, having written nothing. With `stream`, the body of a 200 goes to it as it
  // arrives (the reply's `body` is then empty); any other reply is read whole.
  virtual void Call(std::shared_ptr<const UpstreamRequest> request, Clock::time_point deadline,
                    int64_t max_body_bytes, ReplyCallback done,
                    std::shared_ptr<BodySink> stream) = 0;
  virtual bool open() const = 0;
  // Whether an idle connection may carry the next call: open, with nothing waiting to be read,
  // on the socket or, for TLS, already taken off it by OpenSSL (closes it otherwise).
  virtual bool Idle() = 0;
  virtual void Close() = 0;
  // Calls made on this connection, for telling a first use from a reuse.
  int64_t calls() const { return calls_; }
  // Whether it was closed because the upstream sent bytes nobody asked for (after a reply, or
  // while it idled): an upstream out of step with its requests, whose next stray reply could
  // be read as another request's answer.
  bool unasked_bytes() const { return unasked_bytes_; }
  // Runs, on the connection's loop, when it closes for unasked bytes while it idles (its owner
  // learns then, not when it next takes the connection from its pool).
  void OnUnaskedWhileIdle(absl::AnyInvocable<void()> hook) { on_unasked_ = std::move(hook); }

 protected:
  int64_t calls_ = 0;
  bool unasked_bytes_ = false;
  absl::AnyInvocable<void()> on_unasked_;
};

using ConnectCallback =
    absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<UpstreamConnection>>) &&>;

// Resolves, connects and (for https) completes a TLS handshake that checks the certificate
// against `tls`'s trust and the endpoint's host name. `tls` is used only for https endpoints.
// Returns the connection being made: Close() on it (on `io`'s thread) ends the attempt, and
// `done` then gets an error.
std::shared_ptr<UpstreamConnection> Connect(boost::asio::io_context& io, const Endpoint& endpoint,
                                            std::shared_ptr<boost::asio::ssl::context> tls,
                                            Clock::time_point deadline, ConnectCallback done);

}  // namespace pillar::upstream
