#include "http/server.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
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
#include "http/tls_watcher.h"

namespace pillar::http {

using internal::CheckSharedReload;
using internal::CheckStartingCrls;
using internal::Core;
using internal::Listener;
using internal::ListenerTls;
using internal::Loop;
using internal::MakeTlsContext;
using internal::PublishTlsExpiry;
using internal::Session;
using internal::StampTlsFiles;
using internal::TlsFileStamps;
using internal::TlsWatcher;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// How long the acceptors wait after a failed accept (Impl::PauseAccepting).
constexpr std::chrono::milliseconds kAcceptPause{100};

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

  RaiseMark raise_mark;  // KeepRevocationMarks

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
  std::unique_ptr<TlsWatcher> tls_watcher;  // made by Start(), once the listeners are known
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
        "and the earliest nextUpdate of the client CRLs it checks.",
        {"listener", "what"});
    impl_->core.stats.tls_reloads = &metrics->AddCounter(
        "pillar_tls_reloads_total",
        "Changes of a TLS listener's files (certificate, key, client CA, client CRLs): "
        "reloaded, or refused (the files read before stay in use).",
        {"listener", "outcome"});
    impl_->core.stats.tls_rechecks = &metrics->AddCounter(
        "pillar_tls_client_rechecks_total",
        "Clients of connections made before their listener's TLS files changed, checked again "
        "against the new ones at their next request: verified, or refused (they name nobody).",
        {"listener", "outcome"});
    impl_->core.stats.inflight_bytes =
        &metrics
             ->AddGauge("pillar_http_inflight_bytes",
                        "Bytes reserved by requests read but not answered yet, both listeners "
                        "together ([limits] inflight_bytes_limit).")
             .Get();
  }
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::KeepRevocationMarks(RaiseMark raise) { impl_->raise_mark = std::move(raise); }

absl::StatusOr<uint16_t> HttpServer::AddListener(const ListenerOptions& options,
                                                 const Router& router) {
  const bool tls = !options.tls_certificate.empty() || !options.tls_private_key.empty();
  if (!tls && !options.allow_plaintext && !IsLoopbackAddress(options.address)) {
    return absl::FailedPreconditionError(StrCat(
        "listener '", options.name, "' would serve plaintext on ", options.address,
        ", which is not a loopback address: configure tls_certificate and tls_private_key, or set "
        "allow_plaintext = true"));
  }
  if (absl::Status s = CheckSharedReload(impl_->listeners, options); !s.ok()) return s;
  std::unique_ptr<ListenerTls> context;
  if (tls) {
    const TlsFileStamps stamps = StampTlsFiles(options);  // before the files are read
    absl::StatusOr<std::shared_ptr<ssl::context>> made = MakeTlsContext(options);
    if (!made.ok()) return made.status();
    if (absl::Status s = CheckStartingCrls(impl_->listeners, options, (*made)->native_handle());
        !s.ok()) {
      return s;
    }
    PublishTlsExpiry(options, (*made)->native_handle(), impl_->core.stats.tls_expiry);
    context = std::make_unique<ListenerTls>(*std::move(made), stamps);
    if (absl::Status s = context->StartHistory(options.name, impl_->raise_mark); !s.ok()) return s;
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
  // The acceptor and the timer made in place (GCC 12 warns, wrongly, that a moved acceptor's
  // reactor data may be read uninitialized).
  Listener& listener =
      impl_->listeners.emplace_back(Listener{options, router, std::move(context), {}, {}});
  listener.acceptor.emplace(impl_->loops[0]->context);
  listener.accept_pause.emplace(impl_->loops[0]->context);
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

absl::StatusOr<std::string> HttpServer::VerifyClientCertificate(std::string_view listener,
                                                                std::string_view der) const {
  // The listeners are all added before the server starts, and never removed.
  const Listener* found = nullptr;
  for (const Listener& l : impl_->listeners) {
    if (l.options.name == listener) found = &l;
  }
  if (found == nullptr || found->tls == nullptr ||
      found->options.client_certificates == ListenerOptions::ClientCertificates::kNone) {
    return absl::UnauthenticatedError(
        StrCat("the ", listener, " listener no longer asks for client certificates"));
  }
  const unsigned char* at = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* const end = at + der.size();
  std::unique_ptr<X509, decltype(&X509_free)> cert(d2i_X509(nullptr, &at, long(der.size())),
                                                   X509_free);
  internal::X509Stack sent(sk_X509_new_null());
  while (cert != nullptr && sent != nullptr && at < end) {
    X509* other = d2i_X509(nullptr, &at, long(end - at));
    if (other == nullptr || sk_X509_push(sent.get(), other) <= 0) {
      X509_free(other);
      sent.reset();
    }
  }
  if (cert == nullptr || sent == nullptr) {
    ERR_clear_error();  // this thread's next TLS call must not read d2i's errors as its own
    return absl::UnauthenticatedError("the stored client certificate does not parse");
  }
  const ListenerTls::Current current = found->tls->Get();
  const internal::X509Stack untrusted = found->tls->intermediates().With(sent.get());
  if (untrusted == nullptr) return absl::UnavailableError("cannot check the client certificate");
  const PeerCertificate peer = ReverifyCertificate(cert.get(), current.context->native_handle(),
                                                   untrusted.get(), found->options.client_identity);
  if (!peer.verified) {
    return absl::UnauthenticatedError(
        StrCat("the client certificate no longer verifies: ", peer.failure));
  }
  if (peer.identity.empty()) {
    return absl::UnauthenticatedError("the client certificate names nobody");
  }
  return peer.identity;
}

void HttpServer::Start() {
  impl_->tls_watcher = std::make_unique<TlsWatcher>(impl_->listeners, impl_->core);
  impl_->tls_watcher->Start();
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
  if (impl_->tls_watcher) impl_->tls_watcher->Stop();
  impl_->work.clear();
  for (auto& loop : impl_->loops) loop->context.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace pillar::http
