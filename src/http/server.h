// The HTTP/1.1 server under both of pillar's listeners (data plane and admin plane), on
// Boost.Beast: keep-alive, TLS through OpenSSL when a certificate is configured, and limits on
// header size, body size, request time and idle time, so a slow or hostile client cannot hold
// a worker, and a budget of bytes held by unanswered requests across all connections, so many
// clients together cannot exhaust memory; the Handler judges a body's sender before any of the
// body is held (BeforeBody). It parses,
// matches the route and hands a plain Request to the Handler; it knows nothing of models.
//
//   HttpServer server(limits, handler, &metrics, threads);
//   uint16_t port = *server.AddListener({"data", "127.0.0.1", 0}, router);
//   server.Start();  ...  server.StopAccepting(); server.Stop();
// Protocol errors are answered here, each with a precise 4xx JSON body (503 past the in-flight
// budget) and a count in pillar_http_rejected_total{listener,reason}.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/wait_meter.h"
#include "http/message.h"
#include "http/router.h"
#include "monitor/metrics.h"

namespace pillar::http {

struct Limits {
  // Every byte of a request's header, however the client splits its writes; more get 431.
  size_t header_limit_bytes = 16 * 1024;
  // Header fields per request, chunked trailers included; more get 431. Each parsed field is
  // a node the server holds until the request is answered; 100 is the default of Envoy's
  // max_headers_count and Apache's LimitRequestFields, and browsers send about 20.
  size_t header_fields_limit = 100;
  size_t body_limit_bytes = 8 * 1024 * 1024;
  // Bytes held by requests with a body read but not answered yet, all connections together:
  // each one's header and Content-Length, reserved as soon as the header is read, or its header
  // and the memory its chunked payload takes, before it is taken (chunk framing, which the
  // parser drops, is not charged), so one request never holds more than header_limit_bytes +
  // body_limit_bytes of it. A request that does not fit gets 503 with Retry-After,
  // and its connection is closed. Without it, clients could make the server hold
  // max_connections x body_limit_bytes (78 GiB at the defaults); 1 GiB still holds 128
  // requests of the largest allowed size at once.
  size_t inflight_bytes_limit = size_t(1) << 30;
  // The whole request, from its first byte to its last; a slow sender gets 408 after it.
  absl::Duration request_timeout = absl::Seconds(30);
  // A body holds its reservation while it is read, so its sender must keep it coming: once
  // body_min_rate_grace has passed since the header, a body that has brought fewer than
  // body_min_bytes_per_second for every second past the grace gets 408 (Apache's
  // mod_reqtimeout MinRate, counted as it accumulates, so bytes sent early pay for a stall).
  // Otherwise a client that declares 8 MiB and sends nothing holds it for request_timeout, and
  // 128 such connections fill the default budget for free. 64 KiB/s is under a quarter of the
  // 280 KiB/s a body of the largest default size already needs to arrive within
  // request_timeout; 5 s covers a client's slow start and 100-continue. 0 disables it.
  size_t body_min_bytes_per_second = 64 * 1024;
  absl::Duration body_min_rate_grace = absl::Seconds(5);
  // How long a kept-alive connection may wait for its next request.
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration write_timeout = absl::Seconds(30);
  absl::Duration tls_handshake_timeout = absl::Seconds(10);
  // Open connections on each listener; more are closed on accept and counted.
  size_t max_connections = 10000;
};

struct ListenerOptions {
  std::string name = "data";
  std::string address = "127.0.0.1";
  uint16_t port = 0;            // 0 picks a free port
  std::string tls_certificate;  // PEM chain; TLS is on when both files are set
  // PEM; refused when its group or others may read the file (chmod 600 it).
  std::string tls_private_key;
  bool allow_plaintext = false;  // plaintext on a non-loopback address needs this
  // Mutual TLS: with a CA bundle, the listener asks clients for a certificate and verifies it
  // against the bundle. "optional" lets clients without one in (they then authenticate with a
  // key or token); "require" refuses the handshake without one.
  std::string client_ca;
  // PEM CRLs of the CAs in client_ca (http/revocation.h): checked for every certificate of a
  // client's chain. Empty: no revocation check.
  std::string client_crl;
  enum class ClientCertificates { kNone, kOptional, kRequire };
  ClientCertificates client_certificates = ClientCertificates::kNone;
  // Which name of a verified client certificate becomes Request::peer_identity.
  enum class ClientIdentity { kSubjectCn, kSanUri, kSanDns };
  ClientIdentity client_identity = ClientIdentity::kSubjectCn;
  // How often the TLS files above are checked for changes; a change that passes the checks made
  // at start replaces them for the connections that follow (http/tls_context.h). Zero: read at
  // start only.
  absl::Duration tls_reload = absl::Seconds(1);
};

// The session a request arrived on, for answering it. Shared ownership keeps the connection
// alive while a response is pending.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Sends the response; callable from any thread, once per request.
  virtual void Send(Response response) = 0;
  // A streamed response (server-sent events, in place of Send): its head with no length (chunked
  // transfer coding; to an HTTP/1.0 client, the body ends with the connection), then its pieces,
  // then its end. Each piece is written after the ones before it; `written` runs on the
  // connection's executor once it is on the wire, with false when the client is gone or too slow
  // to take it within the write timeout (nothing more will be written then: the producer stops).
  // A producer that waits for `written` before the next piece holds at most one piece per
  // stream. Called on the connection's executor (Post), in order: StartStream, WriteChunk...,
  // EndStream.
  virtual void StartStream(Response head) = 0;
  virtual void WriteChunk(std::string bytes, absl::AnyInvocable<void(bool) &&> written) = 0;
  virtual void EndStream() = 0;
  // How long this connection's streamed writes have waited for the client's socket: from a
  // write the socket took only in part (full: the client was not reading) to that write's end.
  // Made on first call, on the connection's executor (on a TLS connection, the socket under the
  // TLS stream times its writes from then on: what SSL_write takes says nothing of the socket's
  // room); null when not measured.
  virtual std::shared_ptr<const WaitMeter> stream_waits() { return nullptr; }
  // Runs `task` on the connection's executor.
  virtual void Post(absl::AnyInvocable<void() &&> task) = 0;
  // Runs `gone` (on the connection's executor) if the client closes its side of the connection,
  // or resets it, before the answer starts: the work for the request may stop (its answer then
  // goes nowhere). Checked by the loop's sweep, every 100 ms from 100 ms after this call on, so
  // that an answer quicker than that costs nothing; a client that only half-closes is taken as
  // gone, as nginx takes it. Called on the connection's executor, once per request, before
  // Send or StartStream, which end the watch (a stream learns of it as it writes).
  virtual void OnClientGone(absl::AnyInvocable<void() &&> gone) { (void)gone; }
};

// A request the HTTP layer refused itself (malformed, too large, too slow, no route ...), for
// the access log. Fields that were never read are empty.
struct Rejection {
  std::string_view listener;
  int status = 0;
  std::string_view reason;   // the pillar_http_rejected_total label
  std::string_view message;  // the error sent to the client
  std::string_view remote;
  std::string_view method;
  std::string_view target;
};

// An answer the handler gave that did not reach the client whole, for the access log, whose line
// for the request was written as the answer was handed over.
struct CutAnswer {
  std::string_view listener;
  std::string_view request_id;  // the answer's X-Request-Id
  int status = 0;               // the answer's
  // "write_timeout": the client did not take it within write_timeout_ms; "client_gone": the
  // connection failed under its write (the client reset it); "stopped": the server closed it;
  // "answer_unread": written, but the client had not acknowledged it write_timeout_ms after the
  // connection's end, which then reset it. A client that resets the connection once the answer
  // is written is told of for the bytes the socket had not sent ("client_gone"), not for those
  // sent and unacknowledged: its acknowledgement may have been on its way.
  std::string_view reason;
  std::string_view remote;
  // Bytes not delivered: of the answer, or for answer_unread, what the socket still held (this
  // answer's end, and of the answers before it on the connection, if the client had not read
  // them either; over TLS, and the close_notify after it).
  uint64_t unsent = 0;
};

class Handler {
 public:
  virtual ~Handler() = default;
  virtual void Handle(Request request, std::shared_ptr<ResponseSink> sink) = 0;
  // Called on the connection's thread when a request's header is read and a body follows,
  // before any of the body is charged to the in-flight budget or read (and before 100 Continue
  // invites it): `request` holds all but the body and the route. False: the request is handed
  // to Handle with its body unread (Request::body_unread) and the connection closes after the
  // answer. This is where a server refuses callers it does not know before it holds their bytes
  // (a caller without credentials could otherwise keep Limits::inflight_bytes_limit full); the
  // handler may leave what it found in Request::caller and caller_refusal for Handle.
  virtual bool BeforeBody(Request& request) {
    (void)request;
    return true;
  }
  // Called on the connection's thread for every request the HTTP layer answered itself.
  virtual void OnRejected(const Rejection&) {}
  // Called on the connection's thread for every answer cut on its way to the client (the last
  // one written, when the connection ends with answers unread).
  virtual void OnAnswerCut(const CutAnswer&) {}
};

// Stores max(stored, value) under `name` where it outlives the process (the state store's
// high-water marks) and returns what is stored.
using RaiseMark = std::function<absl::StatusOr<int64_t>(const std::string& name, int64_t value)>;

class HttpServer {
 public:
  // `handler` and every router given to AddListener must outlive the server.
  // `threads` event loops, one per thread, serve the connections.
  HttpServer(Limits limits, Handler& handler, monitor::MetricsRegistry* metrics, int threads);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the bound port. FailedPrecondition for plaintext on a
  // non-loopback address without allow_plaintext; InvalidArgument for bad TLS files;
  // PermissionDenied for a private key file its group or others may read (chmod 600 it).
  [[nodiscard]] absl::StatusOr<uint16_t> AddListener(const ListenerOptions& options,
                                                     const Router& router);
  // Keeps each TLS listener's newest client CRL of each CA (its crlNumber and lastUpdate) in
  // `raise`'s marks, so that a CRL older than one used before a restart is refused at start as
  // it is at a reload (a replayed list would take back revocations). Called before AddListener;
  // without it the history lasts as long as the process.
  void KeepRevocationMarks(RaiseMark raise);
  // The client certificate in `der` (Request::peer_certificate: it first, then certificates its
  // chain may be built from) checked again as `listener`
  // verifies clients now (its client CAs and CRLs, the dates, the chain's intermediates it has
  // seen): the name it gives the client, or Unauthenticated saying why not. Thread-safe; for a
  // job that runs long after its request (jobs/).
  [[nodiscard]] absl::StatusOr<std::string> VerifyClientCertificate(std::string_view listener,
                                                                    std::string_view der) const;
  // Serves until Stop().
  void Start();
  // Closes the listening sockets; open connections are served on.
  void StopAccepting();
  // From now on every response closes its connection.
  void SetDraining();
  // Responses handed to the server whose writing has not finished yet.
  int64_t ResponsesInProgress() const;
  // Stops the event loop and joins its threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackAddress(std::string_view address);

}  // namespace pillar::http
