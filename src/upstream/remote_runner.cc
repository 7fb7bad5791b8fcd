#include "upstream/remote_runner.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "common/strings.h"
#include "protocol/json_codec.h"
#include "runtime/signature.h"
#include "upstream/endpoint_health.h"
#include "upstream/endpoint_picker.h"
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

HealthOptions HealthFrom(const models::RemoteConfig& remote) {
  HealthOptions options;
  options.consecutive_failures = remote.consecutive_failures;
  options.base_ejection = std::chrono::milliseconds(remote.base_ejection_ms);
  options.max_ejection = std::chrono::milliseconds(remote.max_ejection_ms);
  return options;
}

}  // namespace

// What one upstream endpoint has: its parsed URL, its idle kept-alive connections, its health.
struct EndpointSlot {
  Endpoint endpoint;
  std::vector<std::shared_ptr<UpstreamConnection>> idle;
  EndpointHealth health;
  EndpointMetrics metrics;
  int priority = 1;
  int weight = 1;
  int64_t outstanding = 0;  // attempts in flight
  double latency_s = 0;     // moving average of its replies' latency (0: none yet)
};

void Count(monitor::Counter* counter) {
  if (counter != nullptr) counter->Increment();
}

// One request, from admission to its answer; lives on the runner's thread.
struct Call {
  protocol::InferenceRequest request;
  runtime::InferCallback done;
  int64_t rows = 0;
  std::string body;  // encoded once; every attempt's request views it
  Clock::time_point arrived;
  Clock::time_point deadline;
  std::vector<bool> tried;
  std::string last_error;
  bool all_throttled = true;
  // The deadline is the caller's (X-Pillar-Timeout-Ms), sooner than timeout_ms: an attempt cut
  // off by it says nothing of the endpoint.
  bool caller_deadline = false;
  bool probing = false;     // the attempt in flight is its endpoint's half-open probe
  std::string upstream_id;  // the id the upstream sees, and its reply must carry
  int attempts = 0;         // started so far
  bool sent = false;        // an attempt's request went out: an upstream may have seen it
  bool retrying = false;    // holds one of the retry budget's places
  std::optional<int64_t> retry_after;
};

struct RemoteRunner::State : std::enable_shared_from_this<State> {
  models::ModelConfig config;
  std::string target;  // /v2/models/<upstream model>[/versions/<v>]/infer, after the base path
  std::optional<SecretString> token;
  std::shared_ptr<asio::ssl::context> tls;
  std::vector<EndpointSlot> endpoints;
  std::vector<std::vector<size_t>> groups;  // endpoint indices by priority group, best first

  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  protocol::InferenceResponseDecoder decoder;

  // On the runner's thread only:
  bool stopping = false;
  int64_t in_flight = 0;
  std::deque<std::shared_ptr<Call>> queue;
  std::set<std::shared_ptr<UpstreamConnection>> busy;
  // Request ids for upstreams: unique per runner (a random prefix) and per request.
  const std::string id_prefix = HexEncode(RandomBytes(6));
  std::atomic<uint64_t> next_id{0};
  int64_t retrying = 0;  // calls holding a place in the retry budget
  std::set<std::shared_ptr<asio::steady_timer>> backoffs;  // retries waiting, cut short at stop
  std::mt19937_64 jitter{std::random_device{}()};
  EndpointPicker picker{std::random_device{}()};
  RetryMetrics retry_metrics;

  int64_t capacity() const { return int64_t(endpoints.size()) * config.remote.connections; }

  void Admit(std::shared_ptr<Call> call) {
    if (stopping) return Finish(*call, absl::UnavailableError("model is unloading"));
    if (in_flight < capacity()) {
      ++in_flight;
      return Attempt(std::move(call));
    }
    if (int64_t(queue.size()) >= config.remote.max_queue) {
      return std::move(call->done)(
          runtime::UnavailableWithRetry("too many requests waiting for the upstream", 1));
    }
    queue.push_back(std::move(call));
  }

  // Ends `call` and lets the next queued one start. The next one starts from the io_context,
  // not from here: a queue of calls that each end at once would otherwise recurse once per call.
  void Complete(Call& call, absl::StatusOr<runtime::InferResult> result) {
    if (call.retrying) --retrying;
    std::move(call.done)(std::move(result));
    --in_flight;
    if (!queue.empty() && in_flight < capacity()) {
      std::shared_ptr<Call> next = std::move(queue.front());
      queue.pop_front();
      ++in_flight;
      asio::post(io, [self = shared_from_this(), next = std::move(next)]() mutable {
        self->Attempt(std::move(next));
      });
    }
  }

  void Finish(Call& call, absl::Status status) { std::move(call.done)(std::move(status)); }

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

  // The next endpoint to try for `call`, among those it has not tried. Priority groups are
  // taken best first: a group with at least half its endpoints healthy serves from those
  // available (not ejected, not paused, not half-open with its probe out); a group below half
  // passes the request to the groups after it. Only when no group can serve that way is the
  // first group below half in panic, as Envoy's is: ejection is ignored for it (a set mostly out
  // is more likely wrong about itself than all broken). Within the group, the picker chooses.
  // None when nothing is left.
  std::optional<size_t> NextEndpoint(const Call& call, Clock::time_point now) {
    std::vector<Candidate> panic;  // of the first group below half
    for (const std::vector<size_t>& members : groups) {
      size_t healthy = 0;
      std::vector<Candidate> available, eligible;
      for (size_t e : members) {
        const EndpointSlot& slot = endpoints[e];
        healthy += slot.health.state(now) == EndpointState::kHealthy;
        if (call.tried[e]) continue;
        if (slot.health.Available(now)) available.push_back(CandidateFor(e));
        if (!slot.health.Throttled(now)) eligible.push_back(CandidateFor(e));
      }
      if (healthy * 2 >= members.size()) {
        if (!available.empty()) return picker.Pick(available);
      } else if (panic.empty()) {
        panic = std::move(eligible);
      }
    }
    return picker.Pick(panic);
  }

  Candidate CandidateFor(size_t e) const {
    const EndpointSlot& slot = endpoints[e];
    Candidate c;
    c.index = e;
    c.priority = slot.priority;
    c.weight = slot.weight;
    c.outstanding = slot.outstanding;
    c.latency_s = slot.latency_s;
    return c;
  }

  // The wait until some endpoint `call` has not tried may be sent a request.
  std::chrono::seconds WaitForAnEndpoint(const Call& call, Clock::time_point now) const {
    Clock::time_point soonest = Clock::time_point::max();
    for (size_t e = 0; e < endpoints.size(); ++e) {
      if (!call.tried[e]) soonest = std::min(soonest, endpoints[e].health.AvailableAt(now));
    }
    if (soonest == Clock::time_point::max()) return std::chrono::seconds(1);
    return std::max(std::chrono::seconds(1),
                    std::chrono::ceil<std::chrono::seconds>(soonest - now));
  }

  // Whether another endpoint may be ejected: max_ejection_percent of the set are out at most,
  // and at least one may be (0 turns ejection off).
  bool MayEject(Clock::time_point now) const {
    size_t out = 0;
    for (const EndpointSlot& slot : endpoints) {
      out += slot.health.state(now) != EndpointState::kHealthy;
    }
    const int percent = config.remote.max_ejection_percent;
    const size_t allowed =
        percent == 0 ? 0 : std::max<size_t>(1, endpoints.size() * size_t(percent) / 100);
    return out < allowed;
  }

  // What a cut-off attempt says of its endpoint: nothing when the caller's own deadline cut it.
  static EndpointHealth::Outcome CutOffOutcome(const Call& call) {
    return call.caller_deadline && Clock::now() >= call.deadline
               ? EndpointHealth::Outcome::kInconclusive
               : EndpointHealth::Outcome::kFailure;
  }

  // What a reply other than a usable 200 says of its endpoint.
  static EndpointHealth::Outcome ReplyOutcome(const Call& call, const UpstreamReply& reply) {
    using Outcome = EndpointHealth::Outcome;
    if (reply.status == 429) return Outcome::kThrottled;
    if (reply.status == 503 && reply.retry_after_s.value_or(0) > 0) return Outcome::kThrottled;
    if (reply.status == 504 && call.caller_deadline) return Outcome::kInconclusive;
    if (reply.status >= 500) return Outcome::kFailure;
    return Outcome::kSuccess;  // it answers HTTP sanely; a 404 is the request's fault
  }

  void Record(const Call& call, size_t e, EndpointHealth::Outcome outcome,
              std::chrono::seconds retry_after = {}) {
    const Clock::time_point now = Clock::now();
    EndpointHealth& health = endpoints[e].health;
    const EndpointState before = health.state(now);
    const int64_t ejections_before = health.ejections();
    health.Record(outcome, now, call.probing, retry_after);
    if (health.WantsEjection() && MayEject(now)) health.Eject(now);
    const EndpointState after = health.state(now);
    const EndpointMetrics& m = endpoints[e].metrics;
    if (health.ejections() != ejections_before) Count(m.ejections);
    if (m.state != nullptr) m.state->Set(double(after));
    Count(outcome == EndpointHealth::Outcome::kSuccess     ? m.attempts_ok
          : outcome == EndpointHealth::Outcome::kThrottled ? m.attempts_throttled
          : outcome == EndpointHealth::Outcome::kFailure   ? m.attempts_failed
                                                           : nullptr);
    if (health.ejections() != ejections_before) {
      std::fprintf(stderr, "pillar: upstream %s ejected for %lld ms (ejection %lld)\\n",
                   endpoints[e].endpoint.url.c_str(),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              health.AvailableAt(now) - now)
                                              .count()),
                   static_cast<long long>(health.ejections()));
    } else if (before != EndpointState::kHealthy && after == EndpointState::kHealthy) {
      std::fprintf(stderr, "pillar: upstream %s is back in service\\n",
                   endpoints[e].endpoint.url.c_str());
    }
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

  void Attempt(std::shared_ptr<Call> call) {
    if (stopping) return Complete(*call, absl::UnavailableError("model is unloading"));
    const Clock::time_point now = Clock::now();
    if (now >= call->deadline) return Complete(*call, TimedOut(*call));
    if (call->attempts > 0 && NextEndpoint(*call, now)) {
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
    std::optional<size_t> e = NextEndpoint(*call, now);
    if (!e) {
      if (call->last_error.empty()) {  // nothing tried: every endpoint is out or throttled
        return Complete(*call, runtime::UnavailableWithRetry(
                                   "every upstream endpoint is ejected or asked for a pause",
                                   WaitForAnEndpoint(*call, now).count()));
      }
      return Complete(*call, Exhausted(*call));
    }
    call->tried[*e] = true;
    EndpointSlot& endpoint = endpoints[*e];
    call->probing = endpoint.health.state(now) == EndpointState::kHalfOpen;
    if (call->probing) endpoint.health.StartProbe();
    while (!endpoint.idle.empty()) {
      std::shared_ptr<UpstreamConnection> connection = std::move(endpoint.idle.back());
      endpoint.idle.pop_back();
      if (connection->Idle()) return Send(std::move(call), *e, std::move(connection), true);
    }
    Open(std::move(call), *e);
  }

  void Open(std::shared_ptr<Call> call, size_t e) {
    const Clock::time_point connect_deadline = std::min(
        call->deadline, Clock::now() + std::chrono::milliseconds(config.remote.connect_timeout_ms));
    Connect(io, endpoints[e].endpoint, tls, connect_deadline,
            [self = shared_from_this(), call,
             e](absl::StatusOr<std::shared_ptr<UpstreamConnection>> connection) mutable {
              if (self->stopping) {
                if (connection.ok()) (*connection)->Close();
                return self->Complete(*call, absl::UnavailableError("model is unloading"));
              }
              if (!connection.ok()) {
                self->Record(*call, e, self->CutOffOutcome(*call));
                self->Failed(*call, e, ToStd(connection.status().message()), false);
                return self->Attempt(std::move(call));
              }
              self->Send(std::move(call), e, std::move(*connection), false);
            });
  }

  void Send(std::shared_ptr<Call> call, size_t e, std::shared_ptr<UpstreamConnection> connection,
            bool reused) {
    const Endpoint& endpoint = endpoints[e].endpoint;
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
    ++endpoints[e].outstanding;
    const EndpointMetrics& m = endpoints[e].metrics;
    if (m.outstanding != nullptr) m.outstanding->Add(1);
    const Clock::time_point sent = Clock::now();
    UpstreamConnection* raw = connection.get();
    raw->Call(std::move(request), call->deadline, config.remote.max_response_bytes,
              [self = shared_from_this(), call, e, connection = std::move(connection), reused,
               sent](absl::StatusOr<UpstreamReply> reply, CallFailure failure) mutable {
                self->busy.erase(connection);
                EndpointSlot& slot = self->endpoints[e];
                --slot.outstanding;
                const EndpointMetrics& m = slot.metrics;
                if (m.outstanding != nullptr) m.outstanding->Add(-1);
                if (reply.ok() && reply->status == 200) {  // a fast error is not a fast endpoint
                  const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
                  // A moving average over about the last ten replies, for the picker.
                  slot.latency_s =
                      slot.latency_s == 0 ? seconds : 0.9 * slot.latency_s + 0.1 * seconds;
                  if (m.latency != nullptr) m.latency->Observe(seconds);
                }
                self->OnReply(std::move(call), e, std::move(connection), reused, std::move(reply),
                              failure);
              });
  }

  void OnReply(std::shared_ptr<Call> call, size_t e, std::shared_ptr<UpstreamConnection> connection,
               bool reused, absl::StatusOr<UpstreamReply> reply, CallFailure failure) {
    if (!reply.ok()) {
      // Not for a model that is not idempotent: the request may have been read before the close.
      if (reused && failure == CallFailure::kBeforeReply && !stopping && config.remote.idempotent) {
        // A kept-alive connection the upstream had closed meanwhile: nothing reached it, so the
        // same endpoint gets the request again on a new connection, not a failure.
        return Open(std::move(call), e);
      }
      Record(*call, e,
             failure == CallFailure::kDeadline ? CutOffOutcome(*call)
                                               : EndpointHealth::Outcome::kFailure);
      Failed(*call, e, ToStd(reply.status().message()), false);
      return Attempt(std::move(call));
    }
    if (reused && reply->status == 408 && !stopping) {
      // The upstream timed the idle connection out as the request went out: nothing was done.
      return Open(std::move(call), e);
    }
    if (connection->open() && !stopping &&
        int64_t(endpoints[e].idle.size()) < config.remote.connections) {
      endpoints[e].idle.push_back(connection);
    }
    if (reply->status == 200) {
      // The decoder keeps the capacity of the largest document it parsed: a large reply gets a
      // decoder of its own, so one does not pin its size for the life of the version.
      std::optional<protocol::InferenceResponseDecoder> large;
      if (reply->body.size() > kLargeReplyBytes) large.emplace();
      absl::StatusOr<protocol::InferenceResponse> decoded =
          (large ? *large : decoder).Decode(reply->body);
      // A reply without an id is taken: the protocol makes echoing it optional, and a server that
      // does not echo it gets only the idle check's protection (docs/formats/model_store.md).
      if (decoded.ok() && !decoded->id.empty() && decoded->id != call->upstream_id) {
        // The reply answers another request: the connection is out of step with its upstream.
        connection->Close();
        if (reused && !stopping && config.remote.idempotent) return Open(std::move(call), e);
        decoded = absl::InvalidArgumentError(
            StrCat("the reply's id '", decoded->id.substr(0, 64), "' is not the request's"));
      }
      absl::StatusOr<std::vector<protocol::Tensor>> outputs =
          decoded.ok() ? runtime::MatchOutputs(config, call->rows, call->request.requested_outputs,
                                               std::move(decoded->outputs))
                       : absl::StatusOr<std::vector<protocol::Tensor>>(decoded.status());
      if (!outputs.ok()) {
        Record(*call, e, EndpointHealth::Outcome::kFailure);
        Failed(*call, e, StrCat("a reply pillar cannot use: ", outputs.status().message()), false);
        return Attempt(std::move(call));
      }
      Record(*call, e, EndpointHealth::Outcome::kSuccess);
      runtime::InferResult result;
      result.outputs = std::move(*outputs);
      result.compute_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call->arrived)
              .count();
      return Complete(*call, std::move(result));
    }
    const bool throttled = reply->status == 429 || reply->status == 503;
    if (throttled && reply->retry_after_s) {
      call->retry_after = std::min(call->retry_after.value_or(INT64_MAX), *reply->retry_after_s);
    }
    Record(*call, e, ReplyOutcome(*call, *reply),
           std::chrono::seconds(reply->retry_after_s.value_or(0)));
    if (reply->status >= 500 || reply->status == 429) {
      Failed(*call, e, StrCat("answered ", reply->status), throttled);
      return Attempt(std::move(call));
    }
    // Any other status: the upstream refused the request itself, which another replica of the
    // same model would refuse too.
    Complete(*call, runtime::BadGateway(StrCat("upstream ", endpoints[e].endpoint.url, " answered ",
                                               reply->status)));
  }

  void Failed(Call& call, size_t e, std::string_view why, bool throttled) {
    call.last_error = StrCat("upstream ", endpoints[e].endpoint.url, ": ", Redact(why));
    if (!throttled) call.all_throttled = false;
  }

  [[nodiscard]] absl::Status TimedOut(const Call& call) {
    const std::string limit = call.caller_deadline ? std::string("the caller's deadline")
                                                   : StrCat(config.remote.timeout_ms, " ms");
    return absl::DeadlineExceededError(
        StrCat("no answer from the upstream within ", limit,
               call.last_error.empty() ? "" : StrCat(" (", call.last_error, ")")));
  }

  [[nodiscard]] absl::Status Exhausted(const Call& call) {
    if (call.all_throttled) {
      return runtime::UnavailableWithRetry(StrCat("every upstream is busy (", call.last_error, ")"),
                                           std::max<int64_t>(1, call.retry_after.value_or(1)));
    }
    return runtime::BadGateway(call.last_error);
  }

  void Stop() {
    stopping = true;
    for (const auto& timer : backoffs) timer->cancel();
    std::deque<std::shared_ptr<Call>> waiting;
    waiting.swap(queue);
    for (const std::shared_ptr<Call>& call : waiting) {
      std::move(call->done)(absl::UnavailableError("model is unloading"));
    }
    for (EndpointSlot& endpoint : endpoints) {
      for (const auto& connection : endpoint.idle) connection->Close();
      endpoint.idle.clear();
    }
    // Busy connections end their calls with an error, which completes them.
    for (const auto& connection : std::set(busy)) connection->Close();
    work.reset();
  }
};

absl::StatusOr<std::unique_ptr<RemoteRunner>> RemoteRunner::Create(
    const models::ModelConfig& config, std::string_view model_name, std::string_view version,
    const UpstreamMetrics& metrics) {
  auto state = std::make_shared<State>();
  state->config = config;
  const models::RemoteConfig& remote = config.remote;
  bool any_tls = false;
  for (const models::RemoteEndpoint& spec : remote.endpoints) {
    absl::StatusOr<Endpoint> endpoint = ParseEndpoint(spec.url);
    if (!endpoint.ok()) return endpoint.status();
    any_tls = any_tls || endpoint->tls;
    EndpointMetrics endpoint_metrics = metrics.For(model_name, version, endpoint->url);
    state->endpoints.push_back({std::move(*endpoint),
                                {},
                                EndpointHealth(HealthFrom(remote)),
                                endpoint_metrics,
                                spec.priority,
                                spec.weight});
  }
  if (state->endpoints.empty()) return absl::InvalidArgumentError("[remote] has no endpoints");
  std::map<int, std::vector<size_t>> by_priority;
  for (size_t e = 0; e < state->endpoints.size(); ++e) {
    by_priority[state->endpoints[e].priority].push_back(e);
  }
  for (auto& [priority, members] : by_priority) state->groups.push_back(std::move(members));
  state->retry_metrics = metrics.ForRetries(model_name, version);
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
  return std::unique_ptr<RemoteRunner>(new RemoteRunner(std::move(state)));
}

RemoteRunner::RemoteRunner(std::shared_ptr<State> state) : state_(std::move(state)) {
  thread_ = std::thread([state = state_] { state->io.run(); });
}

RemoteRunner::~RemoteRunner() {
  asio::post(state_->io, [state = state_] { state->Stop(); });
  thread_.join();
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
  call->tried.assign(state_->endpoints.size(), false);
  asio::post(state_->io,
             [state = state_, call = std::move(call)]() mutable { state->Admit(std::move(call)); });
}

}  // namespace pillar::upstream
