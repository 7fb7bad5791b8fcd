// Internal to src/http: what every connection shares with its event loop and the server: the
// limits and the in-flight byte budget (Core), a listener's options and router (Listener), and
// the per-loop sweep that checks connections' deadlines (Loop, Deadlined).
#pragma once

#include <time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "http/server.h"
#include "http/tls_context.h"
#include "monitor/metrics.h"

namespace pillar::http::internal {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

struct Stats {
  monitor::Family<monitor::Counter>* rejected = nullptr;
  monitor::Family<monitor::Gauge>* open = nullptr;
  monitor::Family<monitor::Counter>* accepted = nullptr;
  monitor::Gauge* inflight_bytes = nullptr;
  monitor::Family<monitor::Gauge>* tls_expiry = nullptr;
  monitor::Family<monitor::Counter>* tls_reloads = nullptr;
  monitor::Family<monitor::Counter>* tls_rechecks = nullptr;
};

struct Core {
  Limits limits;
  Handler& handler;
  Stats stats;
  std::atomic<bool> draining{false};
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
  std::unique_ptr<ListenerTls> tls;  // null on a plaintext listener
  std::optional<tcp::acceptor> acceptor;
  // Waits before the next accept after one failed (HttpServer::Impl::PauseAccepting).
  std::optional<net::steady_timer> accept_pause;
  bool accept_failing = false;  // since the last accept that succeeded; loop 0 only
  // Open connections on this listener, held to Limits::max_connections each: with one count
  // for both, clients of the data plane could take every place and lock out the admin plane's
  // probes and metrics (review helper-56). Behind a pointer: a Listener is moved into place.
  std::unique_ptr<std::atomic<size_t>> connections = std::make_unique<std::atomic<size_t>>(0);
  monitor::Counter* accepted = nullptr;
  monitor::Gauge* open = nullptr;

  // Failed TLS handshakes said on stderr, at most one line per kHandshakeLogInterval per listener
  // (a scan must not flood the log), with how many were not said since.
  struct HandshakeLog {
    std::atomic<int64_t> last_ns{0};  // 0: never
    std::atomic<int64_t> unsaid{0};
  };
  std::unique_ptr<HandshakeLog> handshake_log = std::make_unique<HandshakeLog>();
  // The same for clients that fail their check after a reload, apart: a handshake failure's
  // line must not hide theirs (found by review helper-64).
  std::unique_ptr<HandshakeLog> recheck_log = std::make_unique<HandshakeLog>();

  void Reject(Core& core, std::string_view reason) const {
    if (core.stats.rejected) core.stats.rejected->Get({options.name, reason}).Increment();
  }

  // A TLS handshake that failed: counted (reason "tls_handshake"), and said with its peer and
  // OpenSSL's reason (a certificate expired or from another CA, an old protocol), which neither
  // the access log nor the audit log sees: no request was read.
  void HandshakeFailed(Core& core, std::string_view remote, std::string_view why,
                       int64_t now_ns) const {
    Reject(core, "tls_handshake");
    SayTls(*handshake_log, StrCat("TLS handshake from ", remote, " failed: ", why), now_ns);
  }

  // A client verified before the listener's TLS files changed, checked again under the new
  // ones: counted (pillar_tls_client_rechecks_total), and when it does not verify (revoked
  // since, its CA gone) said like a failed handshake. Its request goes on naming nobody (the
  // authentication stage refuses or audits it).
  void Rechecked(Core& core, std::string_view remote, bool verified, std::string_view why,
                 int64_t now_ns) const {
    if (core.stats.tls_rechecks) {
      core.stats.tls_rechecks->Get({options.name, verified ? "verified" : "refused"}).Increment();
    }
    if (verified) return;
    SayTls(*recheck_log,
           StrCat("the client on ", remote,
                  ", verified before the TLS files changed, does not verify under them: ", why,
                  "; it names nobody from now on and its connection closes"),
           now_ns);
  }

  // At most one line per kHandshakeLogInterval per listener (a scan must not flood the log),
  // with how many were not said since.
  void SayTls(HandshakeLog& log, std::string_view line, int64_t now_ns) const {
    constexpr int64_t kHandshakeLogInterval = 10'000'000'000;
    int64_t last = log.last_ns.load(std::memory_order_relaxed);
    if ((last != 0 && now_ns - last < kHandshakeLogInterval) ||
        !log.last_ns.compare_exchange_strong(last, now_ns)) {
      log.unsaid.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const int64_t unsaid = log.unsaid.exchange(0);
    std::fprintf(
        stderr, "pillar: listener '%s': %.*s%s\n", options.name.c_str(), int(line.size()),
        line.data(),
        unsaid > 0 ? StrCat(" (and ", unsaid, " more since the last such line)").c_str() : "");
  }
};

// What a connection waits for, and until when. Deadlines are checked by a sweep that runs on
// each loop every kSweepInterval instead of a timer per wait: arming and cancelling a timer
// twice per request cost more than the rest of a cheap request.
class Deadlined {
 public:
  virtual ~Deadlined() = default;
  virtual void OnDeadline() = 0;
  // Each sweep from watch_from_ns on (while it is not 0): whether the client is still there
  // (ResponseSink::OnClientGone).
  virtual void OnWatch() {}
  // Each sweep while `holding`: whether the client has taken an answer that holds a place in a
  // budget (http::Response::held) the kernel still had unsent or unacknowledged when its write
  // completed.
  virtual void OnHolding() {}
  int64_t deadline_ns = 0;    // 0: nothing to wait for
  int64_t watch_from_ns = 0;  // 0: nothing to watch
  bool holding = false;
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
  // Sessions that have shut their side and wait for the client to take what their socket still
  // holds (Session::Linger): no operation of theirs may be pending, so the loop holds them.
  // Destroyed before the context (declared after it). Loop thread only.
  std::vector<std::shared_ptr<Deadlined>> lingering;

  void Keep(std::shared_ptr<Deadlined> session) { lingering.push_back(std::move(session)); }

  // Drops the loop's hold on `session`, which its caller must still hold.
  void LetGo(const Deadlined* session) {
    for (size_t i = 0; i < lingering.size(); ++i) {
      if (lingering[i].get() != session) continue;
      lingering[i] = std::move(lingering.back());
      lingering.pop_back();
      return;
    }
  }

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
      if (session->watch_from_ns != 0 && now >= session->watch_from_ns) session->OnWatch();
      if (session->holding) session->OnHolding();
    }
    sessions.resize(kept);
    sweep.expires_after(kSweepInterval);
    sweep.async_wait([this](beast::error_code ec) {
      if (!ec) Sweep();
    });
  }
};

}  // namespace pillar::http::internal
