#include "upstream/remote_runner.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>
#include <utility>

#include "common/strings.h"
#include "runtime/admission.h"
#include "runtime/signature.h"
#include "upstream/remote_state.h"
#include "upstream/upstream_credentials.h"

namespace pillar::upstream {

void Count(monitor::Counter* counter) {
  if (counter != nullptr) counter->Increment();
}

int64_t MillisUntil(Clock::time_point at, Clock::time_point now) {
  return std::max<int64_t>(0,
                           std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count());
}

void RemoteRunner::State::Admit(std::shared_ptr<Call> call) {
  if (stopping) return Finish(*call, absl::UnavailableError("model is unloading"));
  const Clock::time_point now = Clock::now();
  const CircuitBreaker::Admission admission = backend_breaker->Admit(now);
  if (admission == CircuitBreaker::Admission::kRefused) {
    Count(metrics.refused);
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
    return TryNext(std::move(call));
  }
  if (std::optional<absl::Status> refused = QueueRefusal(*call)) {
    // Overload says nothing of the upstream's health: a probe place taken is given back.
    backend_breaker->Record(CircuitBreaker::Verdict::kIgnored, now, call->backend_probe);
    return Finish(*call, std::move(*refused));
  }
  queue.push_back(std::move(call));
}

// The refusal of `call` when the calls ahead of it (served capacity() at a time) and its own, at
// the measured time of a call, end past its deadline: it would be computed for nobody. None when
// it may go on, or before any call was measured.
std::optional<absl::Status> RemoteRunner::State::DeadlineRefusal(const Call& call,
                                                                 int64_t calls_ahead) const {
  if (mean_call_ns <= 0) return std::nullopt;
  const auto ns = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  return runtime::ShedByWait(EstimatedNanos(calls_ahead), ns(Clock::now()), ns(call.deadline));
}

int64_t RemoteRunner::State::EstimatedNanos(int64_t calls_ahead) const {
  return int64_t((double(calls_ahead) / double(capacity()) + 1) * mean_call_ns);
}

// Why `call` may not wait for a connection: its class's share of the queue is full, or the calls
// queued ahead of it and its own would end past its deadline. None when it may.
std::optional<absl::Status> RemoteRunner::State::QueueRefusal(const Call& call) const {
  const protocol::Priority priority = call.request.priority;
  const int64_t max_queue = config.remote.max_queue;
  const int64_t limit = runtime::QueueLimit(priority, max_queue);
  const int64_t waiting = int64_t(queue.size());
  // Those waiting, and about one more for the calls in flight, which free their places first.
  const int64_t wait_ns = mean_call_ns <= 0 ? 0 : EstimatedNanos(waiting + 1);
  const int64_t retry_s = std::max<int64_t>(1, (wait_ns + 999'999'999) / 1'000'000'000);
  if (waiting >= limit) {
    return runtime::Shed(limit < max_queue
                             ? StrCat("too many requests waiting for the upstream for ",
                                      runtime::PriorityName(priority), "-priority requests (",
                                      waiting, " of ", max_queue, ")")
                             : std::string("too many requests waiting for the upstream"),
                         retry_s);
  }
  return DeadlineRefusal(call, waiting + 1);
}

// Ends `call` and lets the next queued one start. The next one starts from the io_context,
// not from here: a queue of calls that each end at once would otherwise recurse once per call.
void RemoteRunner::State::Complete(Call& call, absl::StatusOr<runtime::InferResult> result) {
  if (call.completed) return;
  call.completed = true;
  if (call.hedge_timer) call.hedge_timer->cancel();
  CancelOthers(call, nullptr);  // what is still in flight is cut off
  if (call.retrying) --retrying;
  if (result.ok()) {  // how long a call holds its place, for the wait estimate
    const double ns = double(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call.started).count());
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
      self->TryNext(std::move(next));
    });
  }
}

void RemoteRunner::State::Finish(Call& call, absl::Status status) {
  std::move(call.done)(std::move(status));
}

runtime::UpstreamStatus RemoteRunner::State::Describe() const {
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

void RemoteRunner::State::Stop() {
  stopping = true;
  if (checker) checker->Stop();
  for (const auto& timer : timers) timer->cancel();
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
  state->metrics = context.metrics.ForRetries(model_name, version);
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
