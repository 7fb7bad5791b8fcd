#include "http/server.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdio>
#include <list>
#include <optional>
#include <thread>

#include "absl/time/time.h"
#include "common/crypto.h"
#include "common/event_loop.h"
#include "common/files.h"
#include "common/thread_name.h"
#include "common/tls_keys.h"
#include "http/peer_identity.h"
#include "http/revocation.h"
#include "http/session.h"

namespace pillar::http {

using internal::Core;
using internal::Listener;
using internal::Loop;
using internal::Session;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// How long the acceptors wait after a failed accept (Impl::PauseAccepting).
constexpr std::chrono::milliseconds kAcceptPause{100};

// A PEM private key, even RSA 16384 with its chain of comments, is far below this.
constexpr std::uintmax_t kMaxPrivateKeyBytes = 1 << 20;

// The private key is read by ReadSecretFile, which refuses a file its group or others may read
// (as ssh refuses such a key), and OpenSSL loads the bytes read just after that check instead
// of opening the path again on its own.
[[nodiscard]] absl::Status LoadPrivateKey(const ListenerOptions& options, ssl::context& context) {
  absl::StatusOr<std::string> pem = ReadSecretFile(options.tls_private_key, kMaxPrivateKeyBytes);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(), StrCat("listener '", options.name,
                                                    "': tls_private_key ", pem.status().message()));
  }
  const absl::Status loaded = UsePrivateKeyPem(context.native_handle(), *pem);
  OPENSSL_cleanse(pem->data(), pem->size());
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(StrCat("listener '", options.name, "': tls_private_key ",
                                             options.tls_private_key, " ", loaded.message()));
  }
  return absl::OkStatus();
}

// What OpenSSL leaves to the application (found by review helper-59): the TLS 1.2 suites
// (kTls12Suites), the server's order of preference, no renegotiation (refused by OpenSSL 3's
// default, said here), and buffers released while a connection idles.
[[nodiscard]] absl::Status HardenTls(const ListenerOptions& options, ssl::context& context) {
  SSL_CTX* ctx = context.native_handle();
  if (SSL_CTX_set_cipher_list(ctx, kTls12Suites) != 1) {
    return absl::InternalError(StrCat("listener '", options.name, "': cannot set TLS suites"));
  }
  SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  return absl::OkStatus();
}

// Without a session id context, OpenSSL answers every attempt to resume a session (by id or
// ticket; TLS 1.2, and TLS 1.3 in OpenSSL 3.0 too) on a listener that verifies client
// certificates with a fatal alert (SESSION_ID_CONTEXT_UNINITIALIZED): the connection fails, and
// the client must reconnect without its session. The context is a digest of the listener's
// name and its client certificate rules, so a session is resumed only under the rules it was
// verified by. It is set on every TLS listener; on those that ask for no certificate it changes
// nothing.
[[nodiscard]] absl::Status SetSessionIdContext(const ListenerOptions& options,
                                               ssl::context& context) {
  const std::string id = Sha256(StrCat("pillar listener\n", options.name, "\n", options.client_ca,
                                       "\n", int(options.client_certificates), "\n",
                                       int(options.client_identity), "\n", options.client_crl));
  static_assert(SSL_MAX_SID_CTX_LENGTH >= 32, "a SHA-256 digest is the session id context");
  if (SSL_CTX_set_session_id_context(context.native_handle(),
                                     reinterpret_cast<const unsigned char*>(id.data()),
                                     unsigned(id.size())) != 1) {
    return absl::InternalError(
        StrCat("listener '", options.name, "': cannot set the TLS session id context"));
  }
  return absl::OkStatus();
}

// Mutual TLS: the listener asks for client certificates and verifies them against client_ca
// (and client_crl); the chain's end travels in session tickets (peer_identity.h).
[[nodiscard]] absl::Status VerifyClients(const ListenerOptions& options, ssl::context& context) {
  if (options.client_certificates == ListenerOptions::ClientCertificates::kNone) {
    return absl::OkStatus();
  }
  if (options.client_ca.empty()) {
    return absl::InvalidArgumentError(
        StrCat("listener '", options.name, "': client certificates need client_ca"));
  }
  beast::error_code ec;
  context.load_verify_file(options.client_ca, ec);
  if (ec) {
    return absl::InvalidArgumentError(StrCat("client_ca ", options.client_ca, ": ", ec.message()));
  }
  if (!options.client_crl.empty()) {
    if (absl::Status s = UseClientCrls(context.native_handle(), options.client_crl); !s.ok()) {
      return absl::Status(s.code(), StrCat("listener '", options.name, "': ", s.message()));
    }
  }
  auto mode = ssl::verify_peer;
  if (options.client_certificates == ListenerOptions::ClientCertificates::kRequire) {
    mode |= ssl::verify_fail_if_no_peer_cert;
  }
  context.set_verify_mode(mode);
  if (!KeepChainEndInSessions(context.native_handle())) {
    return absl::InternalError(
        StrCat("listener '", options.name, "': cannot set the TLS ticket callbacks"));
  }
  return absl::OkStatus();
}

// When what the TLS listener relies on stops being valid, as a metric an alert can watch: its
// certificate's end, and its client CRLs' earliest nextUpdate, past which every client they
// cover is refused. The CRLs are read only at start, so that end is said on stderr too.
void PublishTlsExpiry(const ListenerOptions& options, SSL_CTX* ctx,
                      monitor::Family<monitor::Gauge>* gauge) {
  const std::optional<int64_t> certificate =
      UnixSeconds(X509_get0_notAfter(SSL_CTX_get0_certificate(ctx)));
  if (gauge != nullptr && certificate) {
    gauge->Get({options.name, "certificate"}).Set(double(*certificate));
  }
  const std::optional<int64_t> crls = RevocationEnd(ctx);
  if (!crls) return;
  if (gauge != nullptr) gauge->Get({options.name, "client_crl"}).Set(double(*crls));
  const std::string until =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(*crls), absl::UTCTimeZone());
  std::fprintf(stderr,
               "pillar: listener '%s': client_crl is current until %s; it is read at start: "
               "restart pillar with a current one before then, or every client it covers is "
               "refused\n",
               options.name.c_str(), until.c_str());
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  if (address == "localhost") return true;
  beast::error_code ec;
  net::ip::address parsed = net::ip::make_address(std::string(address), ec);
  return !ec && parsed.is_loopback();
}

// One event loop per thread, like nginx's worker processes: a connection lives on one loop for
// its whole life, so its handlers never hop threads, need no strand, and wake nobody else. The
// acceptors run on loop 0 and hand connections to the loops in turn.
struct HttpServer::Impl {
  Impl(Limits limits, Handler& handler, int threads) : core{limits, handler, {}} {
    for (int i = 0; i < std::max(1, threads); ++i) loops.push_back(std::make_unique<Loop>());
  }

  // Sessions still queued in the loops refer to `core` and their listener, so the loops go
  // first (destroying them), and the acceptors before them, as they belong to loop 0.
  ~Impl() {
    for (Listener& listener : listeners) {
      listener.accept_pause.reset();
      listener.acceptor.reset();
    }
    loops.clear();
  }

  Loop& NextLoop() { return *loops[next_loop++ % loops.size()]; }

  void Accept(Listener& listener) {
    Loop& loop = NextLoop();
    listener.acceptor->async_accept(
        loop.context, [this, &listener, &loop](beast::error_code ec, tcp::socket socket) {
          if (ec == net::error::operation_aborted || !listener.acceptor->is_open()) return;
          if (ec && IsResourceShortage(ec.value())) {
            PauseAccepting(listener, ec);
            return;
          }
          if (ec) {
            // Another failure (a connection aborted before it was taken) is that connection's:
            // pausing for it would let a client slow every accept down.
            listener.Reject(core, "accept_failed");
          } else {
            if (listener.accept_failing) {
              listener.accept_failing = false;
              std::fprintf(stderr, "pillar: listener '%s' accepts connections again\n",
                           listener.options.name.c_str());
            }
            Take(listener, loop, std::move(socket));
          }
          Accept(listener);
        });
  }

  // A connection accepted: served on `loop`, or closed and counted when the listener is full.
  void Take(Listener& listener, Loop& loop, tcp::socket socket) {
    beast::error_code ignored;
    if (listener.connections->load() >= core.limits.max_connections) {
      listener.Reject(core, "too_many_connections");
      socket.close(ignored);
      return;
    }
    if (listener.accepted) listener.accepted->Increment();
    socket.set_option(tcp::no_delay(true), ignored);
    if (listener.tls) {
      std::make_shared<Session<true>>(std::move(socket), core, listener, loop)->Run();
    } else {
      std::make_shared<Session<false>>(std::move(socket), core, listener, loop)->Run();
    }
  }

  // accept() fails when the process or the system is out of descriptors or memory (EMFILE,
  // ENFILE, ENOBUFS, ENOMEM). The connection stays in the backlog, so an accept started at once
  // fails at once again: loop 0 spun a whole core on it (3 CPU-seconds in 3 s, measured, with the
  // descriptors held by idle clients) while the sessions on it waited. So the next accept waits
  // kAcceptPause, as nginx's waits 500 ms; the failure is counted and said once per episode.
  void PauseAccepting(Listener& listener, const beast::error_code& ec) {
    listener.Reject(core, "accept_failed");
    if (!listener.accept_failing) {
      listener.accept_failing = true;
      std::fprintf(stderr,
                   "pillar: listener '%s' cannot accept connections: %s (trying again every "
                   "%lld ms)\n",
                   listener.options.name.c_str(), ec.message().c_str(),
                   static_cast<long long>(kAcceptPause.count()));
    }
    listener.accept_pause->expires_after(kAcceptPause);
    listener.accept_pause->async_wait([this, &listener](beast::error_code wait_ec) {
      if (wait_ec || !listener.acceptor->is_open()) return;
      Accept(listener);
    });
  }

  std::vector<std::unique_ptr<Loop>> loops;
  // Keep the loops running while no socket operation is pending, e.g. during a drain, when the
  // listeners are closed and every open request waits on a model.
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
  size_t next_loop = 0;  // used by loop 0's thread only
  Core core;
  std::list<Listener> listeners;
  std::vector<std::thread> threads;
};

HttpServer::HttpServer(Limits limits, Handler& handler, monitor::MetricsRegistry* metrics,
                       int threads)
    : impl_(std::make_unique<Impl>(limits, handler, threads)) {
  if (metrics != nullptr) {
    impl_->core.stats.rejected = &metrics->AddCounter(
        "pillar_http_rejected_total", "Requests refused by the HTTP layer, by listener and reason.",
        {"listener", "reason"});
    impl_->core.stats.open =
        &metrics->AddGauge("pillar_http_open_connections", "Open connections.", {"listener"});
    impl_->core.stats.accepted = &metrics->AddCounter("pillar_http_connections_total",
                                                      "Accepted connections.", {"listener"});
    impl_->core.stats.tls_expiry = &metrics->AddGauge(
        "pillar_tls_expiry_timestamp_seconds",
        "When what a TLS listener relies on stops being valid (unix seconds): its certificate, "
        "and the earliest nextUpdate of the client CRLs it checks, which are read at start.",
        {"listener", "what"});
    impl_->core.stats.inflight_bytes =
        &metrics
             ->AddGauge("pillar_http_inflight_bytes",
                        "Bytes reserved by requests read but not answered yet, both listeners "
                        "together ([limits] inflight_bytes_limit).")
             .Get();
  }
}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<uint16_t> HttpServer::AddListener(const ListenerOptions& options,
                                                 const Router& router) {
  const bool tls = !options.tls_certificate.empty() || !options.tls_private_key.empty();
  if (!tls && !options.allow_plaintext && !IsLoopbackAddress(options.address)) {
    return absl::FailedPreconditionError(StrCat(
        "listener '", options.name, "' would serve plaintext on ", options.address,
        ", which is not a loopback address: configure tls_certificate and tls_private_key, or set "
        "allow_plaintext = true"));
  }
  std::unique_ptr<ssl::context> context;
  if (tls) {
    context = std::make_unique<ssl::context>(ssl::context::tls_server);
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    context->use_certificate_chain_file(options.tls_certificate, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("tls_certificate ", options.tls_certificate, ": ", ec.message()));
    }
    if (absl::Status s = LoadPrivateKey(options, *context); !s.ok()) return s;
    if (absl::Status s = HardenTls(options, *context); !s.ok()) return s;
    if (absl::Status s = SetSessionIdContext(options, *context); !s.ok()) return s;
    if (absl::Status s = VerifyClients(options, *context); !s.ok()) return s;
    PublishTlsExpiry(options, context->native_handle(), impl_->core.stats.tls_expiry);
  } else if (options.client_certificates != ListenerOptions::ClientCertificates::kNone) {
    return absl::InvalidArgumentError(
        StrCat("listener '", options.name, "': client certificates need TLS"));
  }
  if (!options.client_crl.empty() &&
      options.client_certificates == ListenerOptions::ClientCertificates::kNone) {
    return absl::InvalidArgumentError(
        StrCat("listener '", options.name, "': client_crl without client certificates"));
  }
  beast::error_code ec;
  std::string address = options.address == "localhost" ? "127.0.0.1" : options.address;
  net::ip::address ip = net::ip::make_address(address, ec);
  if (ec)
    return absl::InvalidArgumentError(
        StrCat("listener '", options.name, "': bad address '", options.address, "'"));
  tcp::endpoint endpoint(ip, options.port);
  Listener& listener = impl_->listeners.emplace_back(
      Listener{options, router, std::move(context), tcp::acceptor(impl_->loops[0]->context),
               net::steady_timer(impl_->loops[0]->context)});
  auto fail = [&](std::string_view what) {
    std::string message = StrCat("listener '", options.name, "' on ", options.address, ":",
                                 options.port, ": ", what, ": ", ec.message());
    impl_->listeners.pop_back();
    return absl::UnavailableError(message);
  };
  listener.acceptor->open(endpoint.protocol(), ec);
  if (ec) return fail("open");
  listener.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  listener.acceptor->bind(endpoint, ec);
  if (ec) return fail("bind");
  listener.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  if (impl_->core.stats.open) listener.open = &impl_->core.stats.open->Get({options.name});
  if (impl_->core.stats.accepted)
    listener.accepted = &impl_->core.stats.accepted->Get({options.name});
  impl_->Accept(listener);
  return listener.acceptor->local_endpoint().port();
}

void HttpServer::Start() {
  for (auto& loop : impl_->loops) {
    impl_->work.push_back(net::make_work_guard(loop->context));
    net::post(loop->context, [loop = loop.get()] { loop->Sweep(); });
    impl_->threads.emplace_back([loop = loop.get(), n = impl_->threads.size()] {
      NameThisThread(StrCat("loop-", n));
      const ScopedEventLoop running(loop->context);  // I/O for its requests stays on it
      loop->context.run();
    });
  }
}

void HttpServer::StopAccepting() {
  for (Listener& listener : impl_->listeners) {
    net::post(listener.acceptor->get_executor(), [&listener] {
      beast::error_code ignored;
      listener.acceptor->close(ignored);
      listener.accept_pause->cancel();
    });
  }
}

int64_t HttpServer::ResponsesInProgress() const { return impl_->core.writing.load(); }

void HttpServer::SetDraining() { impl_->core.draining = true; }

void HttpServer::Stop() {
  impl_->work.clear();
  for (auto& loop : impl_->loops) loop->context.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace pillar::http
