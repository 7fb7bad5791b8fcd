#include "upstream/remote_runner.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <future>
#include <random>
#include <set>
#include <utility>

#include "common/strings.h"
#include "protocol/json_codec.h"
#include "runtime/admission.h"
#include "runtime/signature.h"
#include "upstream/circuit_breaker.h"
#include "upstream/endpoint_set.h"
#include "upstream/health_checker.h"
#include "upstream/upstream_connection.h"
#include "upstream/upstream_credentials.h"

namespace pillar::upstream {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

constexpr size_t kLargeReplyBytes = 1 << 20;
// The header in which pillar tells an upstream how long it will wait (http::kTimeoutHeader, which
// a pillar upstream reads; upstream/ does not include http/).
constexpr char kTimeoutHeader[] = "X-Pillar-Timeout-Ms";

void Count(monitor::Counter* counter) {
  if (counter != nullptr) counter->Increment();
}

int64_t MillisUntil(Clock::time_point at, Clock::time_point now) {
  return std::max<int64_t>(0,
                           std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count());
}

// The HTTP status a request's final answer carries, for the backend breaker's status_codes.
int StatusOf(const absl::Status& status) {
  if (runtime::IsBadGateway(status)) return 502;
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    default:
      return 500;
  }
}

}  // namespace

// One request, from admission to its answer; lives on the runner's thread.
struct Call {
  protocol::InferenceRequest request;
  runtime::InferCallback done;
  int64_t rows = 0;
  std::string body;  // encoded once; every attempt's request views it
  Clock::time_point arrived;
  Clock::time_point started;  // when it took its place among the calls in flight
  Clock::time_point deadline;
  std::vector<bool> tried;
  std::string last_error;
  bool all_throttled = true;
  bool all_shed_for_deadline = true;  // every reply so far was a shed for this caller's deadline
  // The deadline is the caller's (X-Pillar-Timeout-Ms), sooner than timeout_ms: an attempt cut
  // off by it says nothing of the endpoint.
  bool caller_deadline = false;
  Ticket ticket;               // the attempt in flight
  bool backend_probe = false;  // let through by the backend breaker while half-open
  std::string upstream_id;     // the id the upstream sees, and its reply must carry
  int attempts = 0;            // started so far
  bool sent = false;           // an attempt's request went out: an upstream may have seen it
  bool retrying = false;       // holds one of the retry budget's places
  std::optional<int64_t> retry_after;

  bool CutByCaller() const { return caller_deadline && Clock::now() >= deadline; }
};

struct RemoteRunner::State : std::enable_shared_from_this<State> {
  models::ModelConfig config;
  std::string model_name;
  std::string version;
  std::string resource;  // model:<name>/<version>, for the audit log
  std::string target;    // /v2/models/<upstream model>[/versions/<v>]/infer, after the base path
  std::optional<SecretString> token;
  std::shared_ptr<asio::ssl::context> tls;
  std::unique_ptr<EndpointSet> endpoints;
  audit::AuditSink* audit = nullptr;
  BreakerSync* breaker_sync = nullptr;
  std::vector<uint64_t> subscriptions;  // with breaker_sync

  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  protocol::InferenceResponseDecoder decoder;

  // On the runner's thread only:
  bool stopping = false;
  int64_t in_flight = 0;
  std::deque<std::shared_ptr<Call>> queue;
  std::set<std::shared_ptr<UpstreamConnection>> busy;
  std::shared_ptr<HealthChecker> checker;
  std::optional<CircuitBreaker> backend_breaker;
  // Request ids for upstreams: unique per runner (a random prefix) and per request.
  const std::string id_prefix = HexEncode(RandomBytes(6));
  std::atomic<uint64_t> next_id{0};
  int64_t retrying = 0;     // calls holding a place in the retry budget
  double mean_call_ns = 0;  // moving average of a successful call's time (0: none yet)
  std::set<std::shared_ptr<asio::steady_timer>> backoffs;  // retries waiting, cut short at stop
  std::mt19937_64 jitter{std::random_device{}()};
  RetryMetrics retry_metrics;

  int64_t capacity() const { return int64_t(endpoints->size()) * config.remote.connections; }

  void Admit(std::shared_ptr<Call> call) {
    if (stopping) return Finish(*call, absl::UnavailableError("model is unloading"));
    const Clock::time_point now = Clock::now();
    const CircuitBreaker::Admission admission = backend_breaker->Admit(now);
    if (admission == CircuitBreaker::Admission::kRefused) {
      Count(retry_metrics.refused);
      const int64_t wait_ms = MillisUntil(backend_breaker->open_until(), now);
      return Finish(*call, runtime::UnavailableWithRetry(
                               StrCat("the circuit breaker of model '", model_name, "' version ",
                                      version, " is open: its upstream is failing"),
                               std::max<int64_t>(1, (wait_ms + 999) / 1000)));
    }
    call->backend_probe = admission == CircuitBreaker::Admission::kProbe;
    if (in_flight < capacity()) {
      ++in_flight;
      call->started = now;
      return Attempt(std::move(call));
    }
    if (std::optional<absl::Status> refused = QueueRefusal(*call)) {
      // Overload says nothing of the upstream's health: a probe place taken is given back.
      backend_breaker->Record(CircuitBreaker::Verdict::kIgnored, now, call->backend_probe);
      return Finish(*call, std::move(*refused));
    }
    queue.push_back(std::move(call));
  }

  // Why `call` may not wait for a connection: its class's share of the queue is full, or its
  // estimated wait (the calls queued ahead of it, served `capacity()` at a time at the measured
  // time of a call) ends past its deadline. None when it may.
  std::optional<absl::Status> QueueRefusal(const Call& call) const {
    const protocol::Priority priority = call.request.priority;
    const int64_t max_queue = config.remote.max_queue;
    const int64_t limit = runtime::QueueLimit(priority, max_queue);
    const int64_t waiting = int64_t(queue.size());
    const int64_t wait_ns =
        mean_call_ns <= 0 ? 0 : int64_t(double(waiting) * mean_call_ns / double(capacity()));
    const int64_t retry_s = std::max<int64_t>(1, (wait_ns + 999'999'999) / 1'000'000'000);
    if (waiting >= limit) {
      return runtime::Shed(limit < max_queue
                               ? StrCat("too many requests waiting for the upstream for ",
                                        runtime::PriorityName(priority), "-priority requests (",
                                        waiting, " of ", max_queue, ")")
                               : std::string("too many requests waiting for the upstream"),
                           retry_s);
    }
    if (mean_call_ns <= 0) return std::nullopt;  // not measured yet
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    return runtime::ShedByWait(
        wait_ns, now_ns,
        std::chrono::duration_cast<std::chrono::nanoseconds>(call.deadline.time_since_epoch())
            .count());
  }

  // Ends `call` and lets the next queued one start. The next one starts from the io_context,
  // not from here: a queue of calls that each end at once would otherwise recurse once per call.
  void Complete(Call& call, absl::StatusOr<runtime::InferResult> result) {
    if (call.retrying) --retrying;
    if (result.ok()) {  // how long a call holds its place, for the wait estimate
      const double ns =
          double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call.started)
                     .count());
      mean_call_ns = mean_call_ns <= 0 ? ns : 0.9 * mean_call_ns + 0.1 * ns;
    }
    RecordBackend(call, result.status());
    std::move(call.done)(std::move(result));
    --in_flight;
    if (!queue.empty() && in_flight < capacity()) {
      std::shared_ptr<Call> next = std::move(queue.front());
      queue.pop_front();
      ++in_flight;
      next->started = Clock::now();
      asio::post(io, [self = shared_from_this(), next = std::move(next)]() mutable {
        self->Attempt(std::move(next));
      });
    }
  }

  void Finish(Call& call, absl::Status status) { std::move(call.done)(std::move(status)); }

  // What a request's answer says of the backend as a whole, for its breaker.
  void RecordBackend(const Call& call, const absl::Status& status) {
    using Verdict = CircuitBreaker::Verdict;
    const Clock::time_point now = Clock::now();
    Verdict verdict = Verdict::kSuccess;
    std::chrono::milliseconds retry_after{0};
    if (stopping || (!status.ok() && (call.CutByCaller() || runtime::IsShedForDeadline(status)))) {
      verdict = Verdict::kIgnored;
    } else if (!status.ok() && backend_breaker->rule().CountsStatus(StatusOf(status))) {
      verdict = Verdict::kFailure;
      retry_after = std::chrono::seconds(runtime::RetryAfterSeconds(status).value_or(0));
    }
    if (std::optional<CircuitBreaker::Transition> change =
            backend_breaker->Record(verdict, now, call.backend_probe, retry_after)) {
      BackendChanged(*change, now, /*from_peer=*/false);
    }
  }

  void BackendChanged(CircuitBreaker::Transition change, Clock::time_point now, bool from_peer) {
    Report(*backend_breaker, change, "", now, from_peer);
    if (retry_metrics.breaker != nullptr) retry_metrics.breaker->Set(double(change.to));
    if (change.to == BreakerState::kOpen) Count(retry_metrics.trips);
    if (change.to == BreakerState::kOpen && !from_peer) {
      PublishTrip(BreakerName(""), backend_breaker->open_until(), now);
    }
  }

  // The name other instances know a breaker by: "<model>/<version>", and the endpoint's URL.
  std::string BreakerName(std::string_view endpoint) const {
    return endpoint.empty() ? StrCat(model_name, "/", version)
                            : StrCat(model_name, "/", version, " ", endpoint);
  }

  void PublishTrip(const std::string& name, Clock::time_point until, Clock::time_point now) {
    if (breaker_sync == nullptr) return;
    const int64_t unix_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    breaker_sync->Publish(name, unix_now + MillisUntil(until, now));
  }

  // A trip of breaker `endpoint` ("" for the version's own) seen by another instance.
  void OnPeerTrip(std::string_view endpoint, int64_t until_unix_ms) {
    if (stopping) return;
    const Clock::time_point now = Clock::now();
    const int64_t unix_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    // At most a day: a clock far off, or a bad message, does not shut a model for good.
    const int64_t left_ms = std::min<int64_t>(until_unix_ms - unix_now, 86'400'000);
    if (left_ms <= 0) return;
    const Clock::time_point until = now + std::chrono::milliseconds(left_ms);
    if (endpoint.empty()) {
      if (auto change = backend_breaker->Trip(until, now)) BackendChanged(*change, now, true);
      return;
    }
    for (size_t e = 0; e < endpoints->size(); ++e) {
      if (endpoints->slot(e).endpoint.url != endpoint) continue;
      EndpointChange change;
      change.endpoint = e;
      change.breaker = endpoints->TripFromPeer(e, until, now);
      if (change.breaker) Announce(change, now, /*from_peer=*/true);
    }
  }

  // A breaker's change of state: one log line and one audit record. `endpoint` is empty for
  // the backend's own breaker.
  void Report(const CircuitBreaker& breaker, CircuitBreaker::Transition change,
              std::string_view endpoint, Clock::time_point now, bool from_peer) {
    const std::string scope = endpoint.empty()
                                  ? StrCat("model '", model_name, "' version ", version)
                                  : StrCat("upstream ", endpoint, " of model '", model_name, "'");
    const std::string reason =
        change.to == BreakerState::kOpen
            ? StrCat("circuit breaker of ", scope, " opened for ",
                     MillisUntil(breaker.open_until(), now), " ms (",
                     from_peer ? std::string("tripped by another instance")
                     : change.from == BreakerState::kHalfOpen
                         ? std::string("a half-open probe failed")
                         : StrCat(breaker.failures(now), " failures of ", breaker.requests(now),
                                  " requests in ", breaker.rule().interval_ms, " ms"),
                     ")")
            : StrCat("circuit breaker of ", scope, " closed: its half-open probes succeeded");
    std::fprintf(stderr, "pillar: %s\n", reason.c_str());
    if (audit == nullptr) return;
    const std::string action = change.to == BreakerState::kOpen ? "breaker_open" : "breaker_close";
    const std::string resource_text =
        endpoint.empty() ? resource : StrCat(resource, " endpoint ", endpoint);
    audit->Record({.kind = audit::EventKind::kModel,
                   .allowed = true,
                   .time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count(),
                   .principal = "pillar",
                   .tenant = {},
                   .action = action,
                   .resource = resource_text,
                   .request_id = {},
                   .remote = {},
                   .explain = [&] { return reason; }});
  }

  // Text that came from an upstream (an error it put in a reply, a name) on its way to a client
  // and the logs: cut short, and without the token, which an upstream may echo back.
  std::string Redact(std::string_view text) const {
    std::string out(text);
    if (token && !token->empty()) {
      const std::string_view secret = token->view();
      for (size_t at; (at = out.find(secret)) != std::string::npos;) {
        out.replace(at, secret.size(), "[redacted]");
      }
      // Text cut short before it got here may end in part of the token.
      for (size_t n = std::min(out.size(), secret.size() - 1); n >= 4; --n) {
        if (std::string_view(out).substr(out.size() - n) == secret.substr(0, n)) {
          out.replace(out.size() - n, n, "[redacted]");
          break;
        }
      }
    }
    if (out.size() > 512) out.resize(512);
    return out;
  }

  // Records an attempt's outcome for its endpoint: health, breaker, metrics, logs.
  void Record(const Call& call, AttemptOutcome outcome) {
    const Clock::time_point now = Clock::now();
    const size_t e = call.ticket.endpoint;
    const EndpointChange change = endpoints->Finish(call.ticket, outcome, now);
    const EndpointMetrics& m = endpoints->slot(e).metrics;
    using Outcome = EndpointHealth::Outcome;
    Count(change.outcome == Outcome::kSuccess     ? m.attempts_ok
          : change.outcome == Outcome::kThrottled ? m.attempts_throttled
          : change.outcome == Outcome::kFailure   ? m.attempts_failed
                                                  : nullptr);
    Announce(change, now);
  }

  // Logs, counts and audits what an endpoint's change says.
  void Announce(const EndpointChange& change, Clock::time_point now, bool from_peer = false) {
    EndpointSlot& slot = endpoints->slot(change.endpoint);
    const EndpointMetrics& m = slot.metrics;
    if (m.state != nullptr) m.state->Set(double(slot.health.state(now)));
    if (change.ejected) {
      Count(m.ejections);
      std::fprintf(stderr, "pillar: upstream %s ejected for %lld ms (ejection %lld)\n",
                   slot.endpoint.url.c_str(),
                   static_cast<long long>(MillisUntil(slot.health.AvailableAt(now), now)),
                   static_cast<long long>(slot.health.ejections()));
    } else if (change.back_in_service) {
      std::fprintf(stderr, "pillar: upstream %s is back in service\n", slot.endpoint.url.c_str());
    }
    if (change.breaker) {
      if (m.breaker != nullptr) m.breaker->Set(double(change.breaker->to));
      if (change.breaker->to == BreakerState::kOpen) Count(m.trips);
      Report(slot.breaker, *change.breaker, slot.endpoint.url, now, from_peer);
      if (change.breaker->to == BreakerState::kOpen && !from_peer) {
        PublishTrip(BreakerName(slot.endpoint.url), slot.breaker.open_until(), now);
      }
    }
  }

  // An active health check's result.
  void OnCheck(size_t e, bool passed, std::string_view why) {
    if (stopping) return;
    const EndpointChange change = endpoints->RecordCheck(e, passed);
    if (change.failed_checks) {
      std::fprintf(stderr, "pillar: upstream %s is out of service: its health checks fail (%s)\n",
                   endpoints->slot(e).endpoint.url.c_str(), Redact(why).c_str());
    }
    Announce(change, Clock::now());
  }

  // Whether `call`, which has failed an attempt, may try again: a non-idempotent request that may
  // have reached an upstream may not; the budget must have a place; the back-off must end before
  // the deadline. Returns the wait before the next attempt, or the status to end the call with.
  [[nodiscard]] absl::StatusOr<std::chrono::milliseconds> RetryWait(Call& call,
                                                                    Clock::time_point now) {
    const models::RemoteConfig& remote = config.remote;
    if (!remote.idempotent && call.sent) return Exhausted(call);
    if (!call.retrying) {
      const int64_t allowance = std::max<int64_t>(remote.min_retry_concurrency,
                                                  in_flight * remote.retry_budget_percent / 100);
      if (retrying >= allowance) {
        Count(retry_metrics.budget_exhausted);
        call.last_error += " (not retried: the retry budget is spent)";
        return Exhausted(call);
      }
      call.retrying = true;
      ++retrying;
    }
    // Full jitter: uniform in [0, min(max, base x 2^(retries so far))].
    const int64_t doublings = std::min(call.attempts - 1, 20);
    const int64_t cap =
        std::min(remote.retry_backoff_max_ms, remote.retry_backoff_base_ms << doublings);
    const std::chrono::milliseconds wait(
        std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(cap, 0))(jitter));
    if (now + wait >= call.deadline) return Exhausted(call);
    return wait;
  }

  // Whether any endpoint is left for `call` to try (without taking anything).
  bool AnyLeft(const Call& call, Clock::time_point now) const {
    for (size_t e = 0; e < endpoints->size(); ++e) {
      if (!call.tried[e] && endpoints->slot(e).breaker.WouldAdmit(now) &&
          !endpoints->slot(e).health.Throttled(now)) {
        return true;
      }
    }
    return false;
  }

  void Attempt(std::shared_ptr<Call> call) {
    if (stopping) return Complete(*call, absl::UnavailableError("model is unloading"));
    const Clock::time_point now = Clock::now();
    if (now >= call->deadline) return Complete(*call, TimedOut(*call));
    if (call->attempts > 0 && AnyLeft(*call, now)) {
      absl::StatusOr<std::chrono::milliseconds> wait = RetryWait(*call, now);
      if (!wait.ok()) return Complete(*call, wait.status());
      Count(retry_metrics.retries);
      if (wait->count() > 0) {
        auto timer = std::make_shared<asio::steady_timer>(io, *wait);
        backoffs.insert(timer);
        timer->async_wait([self = shared_from_this(), call, timer](boost::system::error_code) {
          self->backoffs.erase(timer);
          self->StartAttempt(call);
        });
        return;
      }
    }
    StartAttempt(std::move(call));
  }

  void StartAttempt(std::shared_ptr<Call> call) {
    if (stopping) return Complete(*call, absl::UnavailableError("model is unloading"));
    const Clock::time_point now = Clock::now();
    if (now >= call->deadline) return Complete(*call, TimedOut(*call));
    ++call->attempts;
    std::optional<Ticket> ticket = endpoints->Start(call->tried, now);
    if (!ticket) {
      if (call->last_error.empty()) {  // nothing tried: every endpoint is out or throttled
        return Complete(*call, runtime::UnavailableWithRetry(
                                   "every upstream endpoint is out of service or asked for a pause",
                                   endpoints->WaitForAnEndpoint(call->tried, now).count()));
      }
      return Complete(*call, Exhausted(*call));
    }
    call->ticket = *ticket;
    call->tried[ticket->endpoint] = true;
    EndpointSlot& endpoint = endpoints->slot(ticket->endpoint);
    while (!endpoint.idle.empty()) {
      std::shared_ptr<UpstreamConnection> connection = std::move(endpoint.idle.back());
      endpoint.idle.pop_back();
      if (connection->Idle()) return Send(std::move(call), std::move(connection), true);
    }
    Open(std::move(call));
  }

  void Open(std::shared_ptr<Call> call) {
    const Clock::time_point connect_deadline = std::min(
        call->deadline, Clock::now() + std::chrono::milliseconds(config.remote.connect_timeout_ms));
    Connect(io, endpoints->slot(call->ticket.endpoint).endpoint, tls, connect_deadline,
            [self = shared_from_this(),
             call](absl::StatusOr<std::shared_ptr<UpstreamConnection>> connection) mutable {
              if (self->stopping) {
                if (connection.ok()) (*connection)->Close();
                return self->Complete(*call, absl::UnavailableError("model is unloading"));
              }
              if (!connection.ok()) {
                const bool timed_out =
                    connection.status().code() == absl::StatusCode::kDeadlineExceeded;
                self->Record(
                    *call, {.kind = timed_out ? AttemptOutcome::kTimeout : AttemptOutcome::kConnect,
                            .status = 0,
                            .retry_after_s = 0,
                            .cut_by_caller = call->CutByCaller()});
                self->Failed(*call, ToStd(connection.status().message()), false);
                return self->Attempt(std::move(call));
              }
              self->Send(std::move(call), std::move(*connection), false);
            });
  }

  void Send(std::shared_ptr<Call> call, std::shared_ptr<UpstreamConnection> connection,
            bool reused) {
    EndpointSlot& slot = endpoints->slot(call->ticket.endpoint);
    const Endpoint& endpoint = slot.endpoint;
    auto request =
        std::make_shared<HttpRequest>(http::verb::post, StrCat(endpoint.base_path, target), 11);
    request->set(http::field::host, endpoint.host_header);
    request->set(http::field::content_type, "application/json");
    request->set(http::field::user_agent, "pillar");
    if (token) request->set(http::field::authorization, StrCat("Bearer ", token->view()));
    // What is left of the deadline, so that the upstream does not work for nobody (another
    // pillar reads it; other servers ignore it).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(call->deadline - Clock::now());
    request->set(kTimeoutHeader, std::to_string(std::max<int64_t>(1, left.count())));
    request->body() = boost::beast::span<const char>(call->body.data(), call->body.size());
    request->prepare_payload();
    call->sent = true;
    busy.insert(connection);
    ++slot.outstanding;
    if (slot.metrics.outstanding != nullptr) slot.metrics.outstanding->Add(1);
    const Clock::time_point sent = Clock::now();
    UpstreamConnection* raw = connection.get();
    raw->Call(
        std::move(request), call->deadline, config.remote.max_response_bytes,
        [self = shared_from_this(), call, connection = std::move(connection), reused, sent](
            absl::StatusOr<UpstreamReply> reply, CallFailure failure) mutable {
          self->busy.erase(connection);
          EndpointSlot& slot = self->endpoints->slot(call->ticket.endpoint);
          --slot.outstanding;
          const EndpointMetrics& m = slot.metrics;
          if (m.outstanding != nullptr) m.outstanding->Add(-1);
          if (reply.ok() && reply->status == 200) {  // a fast error is not a fast endpoint
            const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
            // A moving average over about the last ten replies, for the picker.
            slot.latency_s = slot.latency_s == 0 ? seconds : 0.9 * slot.latency_s + 0.1 * seconds;
            if (m.latency != nullptr) m.latency->Observe(seconds);
          }
          self->OnReply(std::move(call), std::move(connection), reused, std::move(reply), failure);
        });
  }

  void OnReply(std::shared_ptr<Call> call, std::shared_ptr<UpstreamConnection> connection,
               bool reused, absl::StatusOr<UpstreamReply> reply, CallFailure failure) {
    if (!reply.ok()) {
      // Not for a model that is not idempotent: the request may have been read before the close.
      if (reused && failure == CallFailure::kBeforeReply && !stopping && config.remote.idempotent) {
        // A kept-alive connection the upstream had closed meanwhile: nothing reached it, so the
        // same endpoint gets the request again on a new connection, not a failure.
        return Open(std::move(call));
      }
      const bool timed_out = failure == CallFailure::kDeadline;
      Record(*call, {.kind = timed_out ? AttemptOutcome::kTimeout : AttemptOutcome::kConnect,
                     .status = 0,
                     .retry_after_s = 0,
                     .cut_by_caller = timed_out && call->CutByCaller()});
      Failed(*call, ToStd(reply.status().message()), false);
      return Attempt(std::move(call));
    }
    if (reused && reply->status == 408 && !stopping) {
      // The upstream timed the idle connection out as the request went out: nothing was done.
      return Open(std::move(call));
    }
    EndpointSlot& slot = endpoints->slot(call->ticket.endpoint);
    if (connection->open() && !stopping && int64_t(slot.idle.size()) < config.remote.connections) {
      slot.idle.push_back(connection);
    }
    if (reply->status == 200) return OnOk(std::move(call), std::move(connection), reused, *reply);
    const bool throttled = reply->status == 429 || reply->status == 503;
    if (throttled && reply->retry_after_s) {
      call->retry_after = std::min(call->retry_after.value_or(INT64_MAX), *reply->retry_after_s);
    }
    // A pillar upstream that refused only because this caller's deadline is too short for its
    // queue: nothing against the endpoint, and no pause for the others' requests.
    const bool shed_for_caller = reply->status == 503 && reply->shed_for_deadline;
    if (!shed_for_caller) call->all_shed_for_deadline = false;
    Record(*call,
           {.kind = AttemptOutcome::kStatus,
            .status = reply->status,
            .retry_after_s = reply->retry_after_s.value_or(0),
            .cut_by_caller = shed_for_caller || (reply->status == 504 && call->caller_deadline)});
    if (reply->status >= 500 || reply->status == 429) {
      Failed(*call, StrCat("answered ", reply->status), throttled);
      return Attempt(std::move(call));
    }
    // Any other status: the upstream refused the request itself, which another replica of the
    // same model would refuse too.
    Complete(*call, runtime::RefusedUpstream(
                        StrCat("upstream ", slot.endpoint.url, " answered ", reply->status)));
  }

  // A 200: decoded, matched to the request and the model's outputs, or a failed attempt.
  void OnOk(std::shared_ptr<Call> call, const std::shared_ptr<UpstreamConnection>& connection,
            bool reused, const UpstreamReply& reply) {
    // The decoder keeps the capacity of the largest document it parsed: a large reply gets a
    // decoder of its own, so one does not pin its size for the life of the version.
    std::optional<protocol::InferenceResponseDecoder> large;
    if (reply.body.size() > kLargeReplyBytes) large.emplace();
    absl::StatusOr<protocol::InferenceResponse> decoded =
        (large ? *large : decoder).Decode(reply.body);
    // A reply without an id is taken: the protocol makes echoing it optional, and a server that
    // does not echo it gets only the idle check's protection (docs/formats/model_store.md).
    if (decoded.ok() && !decoded->id.empty() && decoded->id != call->upstream_id) {
      // The reply answers another request: the connection is out of step with its upstream.
      connection->Close();
      if (reused && !stopping && config.remote.idempotent) return Open(std::move(call));
      decoded = absl::InvalidArgumentError(
          StrCat("the reply's id '", decoded->id.substr(0, 64), "' is not the request's"));
    }
    absl::StatusOr<std::vector<protocol::Tensor>> outputs =
        decoded.ok() ? runtime::MatchOutputs(config, call->rows, call->request.requested_outputs,
                                             std::move(decoded->outputs))
                     : absl::StatusOr<std::vector<protocol::Tensor>>(decoded.status());
    if (!outputs.ok()) {
      Record(*call, {.kind = AttemptOutcome::kBadReply,
                     .status = 200,
                     .retry_after_s = 0,
                     .cut_by_caller = false});
      Failed(*call, StrCat("a reply pillar cannot use: ", outputs.status().message()), false);
      return Attempt(std::move(call));
    }
    Record(
        *call,
        {.kind = AttemptOutcome::kOk, .status = 200, .retry_after_s = 0, .cut_by_caller = false});
    runtime::InferResult result;
    result.outputs = std::move(*outputs);
    result.compute_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call->arrived).count();
    Complete(*call, std::move(result));
  }

  void Failed(Call& call, std::string_view why, bool throttled) {
    call.last_error =
        StrCat("upstream ", endpoints->slot(call.ticket.endpoint).endpoint.url, ": ", Redact(why));
    if (!throttled) call.all_throttled = call.all_shed_for_deadline = false;
  }

  [[nodiscard]] absl::Status TimedOut(const Call& call) {
    const std::string limit = call.caller_deadline ? std::string("the caller's deadline")
                                                   : StrCat(config.remote.timeout_ms, " ms");
    return absl::DeadlineExceededError(
        StrCat("no answer from the upstream within ", limit,
               call.last_error.empty() ? "" : StrCat(" (", call.last_error, ")")));
  }

  [[nodiscard]] absl::Status Exhausted(const Call& call) {
    if (call.all_throttled && call.all_shed_for_deadline) {  // passed on as it came
      return runtime::Shed(
          StrCat("every upstream's queue is longer than the deadline (", call.last_error, ")"),
          std::max<int64_t>(1, call.retry_after.value_or(1)),
          /*for_deadline=*/true);
    }
    if (call.all_throttled) {
      return runtime::UnavailableWithRetry(StrCat("every upstream is busy (", call.last_error, ")"),
                                           std::max<int64_t>(1, call.retry_after.value_or(1)));
    }
    return runtime::BadGateway(call.last_error);
  }

  runtime::UpstreamStatus Describe() const {
    const Clock::time_point now = Clock::now();
    runtime::UpstreamStatus status;
    status.breaker = std::string(BreakerStateName(backend_breaker->state(now)));
    status.trips = backend_breaker->trips();
    if (backend_breaker->state(now) == BreakerState::kOpen) {
      status.breaker_open_ms = MillisUntil(backend_breaker->open_until(), now);
    }
    status.in_flight = in_flight;
    status.queued = int64_t(queue.size());
    for (size_t e = 0; e < endpoints->size(); ++e) {
      const EndpointSlot& slot = endpoints->slot(e);
      runtime::UpstreamStatus::Endpoint out;
      out.url = slot.endpoint.url;
      out.zone = slot.zone;
      out.priority = slot.priority;
      out.weight = slot.weight;
      out.health = std::string(EndpointStateName(slot.health.state(now)));
      out.breaker = std::string(BreakerStateName(slot.breaker.state(now)));
      out.outstanding = slot.outstanding;
      out.latency_ms = slot.latency_s * 1000;
      out.ejections = slot.health.ejections();
      out.trips = slot.breaker.trips();
      if (slot.breaker.state(now) == BreakerState::kOpen) {
        out.breaker_open_ms = MillisUntil(slot.breaker.open_until(), now);
      }
      status.endpoints.push_back(std::move(out));
    }
    return status;
  }

  void Stop() {
    stopping = true;
    if (checker) checker->Stop();
    for (const auto& timer : backoffs) timer->cancel();
    std::deque<std::shared_ptr<Call>> waiting;
    waiting.swap(queue);
    for (const std::shared_ptr<Call>& call : waiting) {
      std::move(call->done)(absl::UnavailableError("model is unloading"));
    }
    for (size_t e = 0; e < endpoints->size(); ++e) {
      EndpointSlot& slot = endpoints->slot(e);
      for (const auto& connection : slot.idle) connection->Close();
      slot.idle.clear();
    }
    // Busy connections end their calls with an error, which completes them.
    for (const auto& connection : std::set(busy)) connection->Close();
    work.reset();
  }
};

absl::StatusOr<std::unique_ptr<RemoteRunner>> RemoteRunner::Create(
    const models::ModelConfig& config, std::string_view model_name, std::string_view version,
    RemoteContext context) {
  auto state = std::make_shared<State>();
  state->config = config;
  state->model_name = std::string(model_name);
  state->version = std::string(version);
  state->resource = StrCat("model:", model_name, "/", version);
  state->audit = context.audit;
  state->breaker_sync = context.breaker_sync;
  const models::RemoteConfig& remote = config.remote;
  if (remote.endpoints.empty()) return absl::InvalidArgumentError("[remote] has no endpoints");
  bool any_tls = false;
  std::vector<Endpoint> parsed;
  std::vector<EndpointMetrics> metrics;
  for (const models::RemoteEndpoint& spec : remote.endpoints) {
    absl::StatusOr<Endpoint> endpoint = ParseEndpoint(spec.url);
    if (!endpoint.ok()) return endpoint.status();
    any_tls = any_tls || endpoint->tls;
    metrics.push_back(context.metrics.For(model_name, version, endpoint->url));
    parsed.push_back(std::move(*endpoint));
  }
  state->endpoints = std::make_unique<EndpointSet>(state->config.remote, parsed, metrics,
                                                   context.zone, std::random_device{}());
  state->backend_breaker.emplace(remote.backend_breaker);
  state->retry_metrics = context.metrics.ForRetries(model_name, version);
  if (any_tls) {
    absl::StatusOr<std::shared_ptr<asio::ssl::context>> tls = MakeTlsContext(remote);
    if (!tls.ok()) return tls.status();
    state->tls = std::move(*tls);
  }
  if (!remote.credentials_file.empty()) {
    absl::StatusOr<SecretString> token = ReadToken(remote.credentials_file);
    if (!token.ok()) return token.status();
    state->token = std::move(*token);
  }
  const std::string upstream_model = remote.model.empty() ? std::string(model_name) : remote.model;
  state->target =
      StrCat("/v2/models/", upstream_model,
             remote.version.empty() ? "" : StrCat("/versions/", remote.version), "/infer");
  if (remote.health_check.enabled && context.active_checks) {
    std::weak_ptr<State> weak = state;
    state->checker = std::make_shared<HealthChecker>(
        state->io, std::move(parsed), state->tls, state->token ? &*state->token : nullptr,
        remote.health_check, [weak](size_t e, bool passed, std::string_view why) {
          if (std::shared_ptr<State> s = weak.lock()) s->OnCheck(e, passed, why);
        });
  }
  return std::unique_ptr<RemoteRunner>(new RemoteRunner(std::move(state)));
}

RemoteRunner::RemoteRunner(std::shared_ptr<State> state) : state_(std::move(state)) {
  if (BreakerSync* sync = state_->breaker_sync) {
    // The version's breaker, and each endpoint's when it has one.
    std::vector<std::string> scopes = {""};
    if (state_->config.remote.breaker.enabled()) {
      for (size_t e = 0; e < state_->endpoints->size(); ++e) {
        scopes.push_back(state_->endpoints->slot(e).endpoint.url);
      }
    }
    std::weak_ptr<State> weak = state_;
    for (const std::string& scope : scopes) {
      state_->subscriptions.push_back(
          sync->Subscribe(state_->BreakerName(scope), [weak, scope](int64_t until_unix_ms) {
            if (std::shared_ptr<State> s = weak.lock()) {
              asio::post(s->io, [s, scope, until_unix_ms] { s->OnPeerTrip(scope, until_unix_ms); });
            }
          }));
    }
  }
  if (state_->checker) {
    asio::post(state_->io, [state = state_] {
      if (!state->stopping) state->checker->Start();
    });
  }
  thread_ = std::thread([state = state_] { state->io.run(); });
}

RemoteRunner::~RemoteRunner() {
  for (uint64_t token : state_->subscriptions) state_->breaker_sync->Unsubscribe(token);
  asio::post(state_->io, [state = state_] { state->Stop(); });
  thread_.join();
}

std::optional<runtime::UpstreamStatus> RemoteRunner::Upstreams() const {
  auto promise = std::make_shared<std::promise<runtime::UpstreamStatus>>();
  std::future<runtime::UpstreamStatus> future = promise->get_future();
  asio::post(state_->io, [state = state_, promise] { promise->set_value(state->Describe()); });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
  return future.get();
}

void RemoteRunner::Infer(protocol::InferenceRequest request, runtime::InferCallback done) {
  absl::StatusOr<int64_t> rows = runtime::CheckRequest(state_->config, request);
  if (!rows.ok()) return std::move(done)(rows.status());
  auto call = std::make_shared<Call>();
  call->rows = *rows;
  // The upstream sees an id of pillar's, which its reply must carry back (Open Inference Protocol
  // servers echo the request's id): a reply that answers another request, on a kept-alive
  // connection an upstream wrote more to than it was asked, is then never taken for this one.
  // The client's own id is the execute stage's to put back.
  std::string client_id = std::exchange(
      request.id, StrCat("pillar-", state_->id_prefix, "-", state_->next_id.fetch_add(1)));
  call->body = protocol::EncodeInferenceRequest(request);
  call->upstream_id = std::exchange(request.id, std::move(client_id));
  call->request = std::move(request);
  call->done = std::move(done);
  call->arrived = Clock::now();
  call->deadline = call->arrived + std::chrono::milliseconds(state_->config.remote.timeout_ms);
  if (call->request.deadline_ns > 0) {  // the client's own, when it is sooner
    call->caller_deadline =
        Clock::time_point(std::chrono::nanoseconds(call->request.deadline_ns)) < call->deadline;
    call->deadline = std::min(
        call->deadline, Clock::time_point(std::chrono::nanoseconds(call->request.deadline_ns)));
  }
  call->tried.assign(state_->endpoints->size(), false);
  asio::post(state_->io,
             [state = state_, call = std::move(call)]() mutable { state->Admit(std::move(call)); });
}

}  // namespace pillar::upstream
