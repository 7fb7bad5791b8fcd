#include "upstream/remote_runner.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <utility>

#include "common/event_loop.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "protocol/openai_request.h"
#include "runtime/admission.h"
#include "runtime/signature.h"
#include "upstream/remote_state.h"
#include "upstream/upstream_credentials.h"

namespace pillar::upstream {

void Count(monitor::Counter* counter) {
  if (counter != nullptr) counter->Increment();
}

namespace {

// Steady-clock nanoseconds, as requests carry their deadlines.
int64_t SteadyNanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

int64_t MillisUntil(Clock::time_point at, Clock::time_point now) {
  return std::max<int64_t>(0,
                           std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count());
}

void RemoteRunner::State::AbandonOnItsLane(std::shared_ptr<Call> call) {
  // Review helper-97: run on the client's loop, Abandon closed the connection of a call that had
  // moved to another loop while that loop read from it, and completed the call while a stream's
  // first event was on its way to the exchange it then destroyed (the gateway aborted).
  // Held weakly: the runner's own lane may have stopped (the model unloaded), and a task that
  // never runs must not keep the state, whose io_context holds it, alive (review helper-98).
  const size_t lane = call->lane;
  asio::post(*lanes[lane], [weak = weak_from_this(), call = std::move(call), lane]() mutable {
    const std::shared_ptr<State> self = weak.lock();
    if (self == nullptr) return;
    absl::MutexLock lock(&self->mu);
    if (call->lane != lane) return self->AbandonOnItsLane(std::move(call));  // it moved since
    self->Abandon(call);
  });
}

// The client went away: a call waiting for a place leaves the queue, one in flight ends (its
// attempts cut off), one not admitted yet is ended by Admit. On the call's lane.
void RemoteRunner::State::Abandon(const std::shared_ptr<Call>& call) {
  if (call->completed || call->abandoned) return;
  call->abandoned = true;
  Count(metrics.abandoned);
  if (const auto queued = std::find(queue.begin(), queue.end(), call); queued != queue.end()) {
    queue.erase(queued);
    call->completed = true;
    // As a refusal from the queue does: a probe place the call took is given back, or a
    // half-open breaker would wait for a probe that never runs.
    backend_breaker->Record(CircuitBreaker::Verdict::kIgnored, Clock::now(), call->backend_probe);
    return Finish(*call, absl::CancelledError("the client went away"));
  }
  if (call->started == Clock::time_point()) return;  // not admitted yet
  Complete(*call, absl::CancelledError("the client went away"));
}

void RemoteRunner::State::Admit(std::shared_ptr<Call> call) {
  if (call->abandoned) {
    call->completed = true;
    return Finish(*call, absl::CancelledError("the client went away"));
  }
  // timeout_ms is read here, on the runner's thread: Reconfigure() may change it.
  call->deadline = call->arrived + std::chrono::milliseconds(config.remote.timeout_ms);
  if (call->request.deadline_ns > 0) {  // the client's own, when it is sooner
    const Clock::time_point caller(std::chrono::nanoseconds(call->request.deadline_ns));
    call->caller_deadline = caller < call->deadline;
    call->deadline = std::min(call->deadline, caller);
  }
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
  // A caller told to come back, back at its time, takes the place kept for it: at the front of
  // its class, past the class's share of the queue and the wait estimate.
  call->promised = promises.Redeem(call->request.caller, SteadyNanos(now));
  if (in_flight < capacity()) {
    ++in_flight;
    call->started = now;
    return TryNext(std::move(call));
  }
  // The queue is ordered by class, first come first served within one: a call goes behind
  // those of its class or higher, ahead of the lower ones.
  // Searched from the back, where a call of the common class stops at once.
  auto place = queue.end();
  const protocol::Priority priority = call->request.priority;
  while (place != queue.begin()) {
    const Call& before = **std::prev(place);
    const bool pass = before.request.priority > priority ||
                      (call->promised && before.request.priority == priority && !before.promised);
    if (!pass) break;
    --place;
  }
  if (std::optional<absl::Status> refused =
          call->promised ? std::nullopt : QueueRefusal(*call, place - queue.begin())) {
    // Overload says nothing of the upstream's health: a probe place taken is given back.
    backend_breaker->Record(CircuitBreaker::Verdict::kIgnored, now, call->backend_probe);
    return Finish(*call, std::move(*refused));
  }
  call->queued = true;
  queue.insert(place, std::move(call));
}

// The refusal of `call` when the calls ahead of it (served capacity() at a time) and its own, at
// the measured time of a call, end past its deadline: it would be computed for nobody. None when
// it may go on, or before any call was measured.
std::optional<absl::Status> RemoteRunner::State::DeadlineRefusal(const Call& call,
                                                                 int64_t calls_ahead) {
  if (mean_call_ns <= 0) return std::nullopt;
  const int64_t wait_ns = EstimatedNanos(calls_ahead);
  if (!runtime::MissesDeadline(wait_ns, SteadyNanos(Clock::now()), SteadyNanos(call.deadline))) {
    return std::nullopt;
  }
  return runtime::ShedForDeadline(wait_ns, RetryAfter(call, runtime::CeilSeconds(wait_ns)));
}

int64_t RemoteRunner::State::RetryAfter(const Call& call, int64_t estimate_s) {
  if (mean_call_ns <= 0) return estimate_s;
  return promises.Promise(call.request.caller, call.request.principal, SteadyNanos(Clock::now()),
                          double(capacity()) * 1e9 / mean_call_ns, estimate_s);
}

int64_t RemoteRunner::State::EstimatedNanos(int64_t calls_ahead) const {
  return int64_t((double(calls_ahead) / double(capacity()) + 1) * mean_call_ns);
}

// Why `call` may not wait for a connection: its class's share of the queue is full, or the
// `ahead` calls it would queue behind and its own would end past its deadline. None when it may.
std::optional<absl::Status> RemoteRunner::State::QueueRefusal(const Call& call, int64_t ahead) {
  const protocol::Priority priority = call.request.priority;
  const int64_t max_queue = config.remote.max_queue;
  const int64_t limit = runtime::QueueLimit(priority, max_queue);
  const int64_t waiting = int64_t(queue.size());
  // Those ahead, and about one more for the calls in flight, which free their places first; and
  // the callers told to come back by then, who will go ahead of it.
  if (mean_call_ns > 0) {
    ahead += promises.PendingBefore(SteadyNanos(Clock::now()) + EstimatedNanos(ahead + 1));
  }
  const int64_t wait_ns = mean_call_ns <= 0 ? 0 : EstimatedNanos(ahead + 1);
  if (waiting >= limit) {
    const int64_t retry_s = RetryAfter(call, runtime::CeilSeconds(wait_ns));
    return runtime::Shed(limit < max_queue
                             ? StrCat("too many requests waiting for the upstream for ",
                                      runtime::PriorityName(priority), "-priority requests (",
                                      waiting, " of ", max_queue, ")")
                             : std::string("too many requests waiting for the upstream"),
                         retry_s);
  }
  return DeadlineRefusal(call, ahead + 1);
}

// Ends `call` and lets the next queued one start. The next one starts from the io_context,
// not from here: a queue of calls that each end at once would otherwise recurse once per call.
void RemoteRunner::State::Complete(Call& call, absl::StatusOr<runtime::InferResult> result) {
  if (call.completed) return;
  call.completed = true;
  if (call.hedge_timer) call.hedge_timer->cancel();
  CancelOthers(call, nullptr);  // what is still in flight is cut off
  if (call.retrying) --retrying;
  // How long a call holds its place, for the wait estimate (a lingering one's, when it ends).
  if (result.ok() && !call.lingering) NoteHeld(call);
  if (result.ok()) {  // what the call's caller waited for the answer, its queue included
    result->compute_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call.arrived).count();
  }
  RecordBackend(call, result.status());
  std::move(call.done)(std::move(result));
  if (call.lingering) return;  // its place is given back when its attempt ends (EndLinger)
  --in_flight;
  StartQueued();
}

void RemoteRunner::State::NoteHeld(const Call& call) {
  const double ns = double(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - call.started).count());
  mean_call_ns = mean_call_ns <= 0 ? ns : 0.9 * mean_call_ns + 0.1 * ns;
}

void RemoteRunner::State::StartQueued() {
  while (!queue.empty() && in_flight < capacity()) {
    std::shared_ptr<Call> next = std::move(queue.front());
    queue.pop_front();
    ++in_flight;
    next->started = Clock::now();
    asio::io_context& lane = *lanes[next->lane];  // before `next` moves into the task
    asio::post(lane, [self = shared_from_this(), next = std::move(next)]() mutable {
      absl::MutexLock lock(&self->mu);
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
    out.outstanding = *slot.outstanding;
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
  for (const auto& timer : timers) {
    asio::post(timer->get_executor(), [timer] { timer->cancel(); });
  }
  std::deque<std::shared_ptr<Call>> waiting;
  waiting.swap(queue);
  for (const std::shared_ptr<Call>& call : waiting) {
    std::move(call->done)(absl::UnavailableError("model is unloading"));
  }
  for (size_t e = 0; e < endpoints->size(); ++e) CloseIdle(endpoints->slot(e));
  // Busy connections end their calls with an error, which completes them.
  for (const auto& [connection, lane] : busy) {
    asio::post(*lanes[lane], [connection = connection] { connection->Close(); });
  }
  work.reset();
}

absl::StatusOr<std::unique_ptr<RemoteRunner>> RemoteRunner::Create(
    const models::ModelConfig& config, std::string_view model_name, std::string_view version,
    RemoteContext context) {
  auto state = std::make_shared<State>();
  state->config = config;
  state->signed_remote = config.remote;
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
    metrics.push_back(context.metrics.For(model_name, version, endpoint->place));
    parsed.push_back(std::move(*endpoint));
  }
  state->zone = context.zone;
  {
    absl::MutexLock lock(&state->mu);  // not shared yet, which the analysis cannot know
    state->endpoints = std::make_shared<EndpointSet>(state->config.remote, parsed, metrics,
                                                     context.zone, std::random_device{}());
    state->ShareOutstanding(*state->endpoints);
    state->backend_breaker.emplace(remote.backend_breaker);
  }
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
    state->redactor.emplace(state->token->view());
    state->credential = CredentialFor(remote, *state->token);
  }
  const std::string upstream_model = remote.model.empty() ? std::string(model_name) : remote.model;
  state->upstream_model = upstream_model;
  if (!remote.api_version.empty()) state->query = StrCat("?api-version=", remote.api_version);
  state->target =
      StrCat("/v2/models/", upstream_model,
             remote.version.empty() ? "" : StrCat("/versions/", remote.version), "/infer");
  state->metric_families = context.metrics;
  state->gauge_claim = context.metrics.owners->Claim(model_name, version);
  state->active_checks = context.active_checks;
  return std::unique_ptr<RemoteRunner>(new RemoteRunner(std::move(state)));
}

void RemoteRunner::State::StartChecks() {
  if (checker) checker->Stop();
  checker.reset();
  if (!config.remote.health_check.enabled || !active_checks || stopping) return;
  std::vector<Endpoint> targets;
  for (size_t e = 0; e < endpoints->size(); ++e) targets.push_back(endpoints->slot(e).endpoint);
  std::weak_ptr<State> weak = shared_from_this();
  const EndpointSet* checked = endpoints.get();
  checker = std::make_shared<HealthChecker>(
      io, std::move(targets), tls, credential ? &*credential : nullptr, config.remote.health_check,
      [weak, checked](size_t e, bool passed, std::string_view why) {
        std::shared_ptr<State> s = weak.lock();
        if (s == nullptr) return;
        absl::MutexLock lock(&s->mu);
        // A result for endpoints no longer in service is dropped (the checker was stopped).
        if (s->endpoints.get() == checked) s->OnCheck(e, passed, why);
      });
  checker->Start();
}

bool RemoteRunner::State::RefreshGauges(Clock::time_point now) {
  // A newer runner serves the version: its view is the one in service.
  if (!metric_families.owners->Owns(model_name, version, gauge_claim)) return false;
  for (size_t e = 0; e < endpoints->size(); ++e) {
    const EndpointSlot& slot = endpoints->slot(e);
    if (slot.metrics.state != nullptr) slot.metrics.state->Set(double(slot.health.state(now)));
    if (slot.metrics.breaker != nullptr) slot.metrics.breaker->Set(double(slot.breaker.state(now)));
  }
  if (metrics.breaker != nullptr && backend_breaker) {
    metrics.breaker->Set(double(backend_breaker->state(now)));
  }
  return true;
}

void RemoteRunner::State::ScheduleGauges() {
  if (stopping) return;
  auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(1));
  timers.insert(timer);
  timer->async_wait([self = shared_from_this(), timer](boost::system::error_code) {
    absl::MutexLock lock(&self->mu);
    self->timers.erase(timer);
    if (self->stopping || !self->RefreshGauges(Clock::now())) return;
    self->ScheduleGauges();
  });
}

void RemoteRunner::State::ShareOutstanding(EndpointSet& set) {
  std::erase_if(outstanding_by_place, [](const auto& place) { return place.second.expired(); });
  for (size_t e = 0; e < set.size(); ++e) {
    EndpointSlot& slot = set.slot(e);
    std::weak_ptr<int64_t>& known = outstanding_by_place[slot.endpoint.place];
    if (std::shared_ptr<int64_t> count = known.lock()) {
      slot.outstanding = std::move(count);
    } else {
      known = slot.outstanding;
    }
  }
}

void RemoteRunner::State::SubscribeTrips() {
  if (breaker_sync == nullptr) return;
  // The version's breaker, and each endpoint's when it has one.
  std::vector<std::string> scopes = {""};
  if (config.remote.breaker.enabled()) {
    for (size_t e = 0; e < endpoints->size(); ++e)
      scopes.push_back(endpoints->slot(e).endpoint.place);
  }
  std::weak_ptr<State> weak = shared_from_this();
  for (const std::string& scope : scopes) {
    subscriptions.push_back(
        breaker_sync->Subscribe(BreakerName(scope), [weak, scope](int64_t until_unix_ms) {
          if (std::shared_ptr<State> s = weak.lock()) {
            asio::post(s->io, [s, scope, until_unix_ms] {
              absl::MutexLock lock(&s->mu);
              s->OnPeerTrip(scope, until_unix_ms);
            });
          }
        }));
  }
}

void RemoteRunner::State::UnsubscribeTrips() {
  for (uint64_t token : subscriptions) breaker_sync->Unsubscribe(token);
  subscriptions.clear();
}

void RemoteRunner::State::ApplyReconfigure(models::RemoteConfig remote,
                                           std::vector<Endpoint> parsed,
                                           std::shared_ptr<asio::ssl::context> new_tls) {
  if (stopping) return;
  // The same configuration (a backends file rewritten as it was, or touched): the endpoints in
  // service stay as they are, their checks and pools.
  if (remote == config.remote) return;
  if (tls == nullptr) tls = std::move(new_tls);
  const bool breaker_changed = !(config.remote.backend_breaker == remote.backend_breaker);
  config.remote = std::move(remote);
  std::vector<EndpointMetrics> endpoint_metrics;
  for (const Endpoint& endpoint : parsed) {
    endpoint_metrics.push_back(metric_families.For(model_name, version, endpoint.place));
  }
  auto next = std::make_shared<EndpointSet>(config.remote, std::move(parsed), endpoint_metrics,
                                            zone, std::random_device{}());
  const Clock::time_point now = Clock::now();
  const std::vector<std::pair<size_t, BreakerState>> reset = next->CarryOver(*endpoints, now);
  ShareOutstanding(*next);
  // The idle connections of endpoints that left close now; busy ones when their call ends.
  for (size_t e = 0; e < endpoints->size(); ++e) CloseIdle(endpoints->slot(e));
  endpoints = std::move(next);
  // A new rule starts a breaker closed: a transition, logged and audited like the others (it
  // went unsaid, and a breaker opened by an outage closed with no record of why).
  constexpr std::string_view kNewRule = "its rule changed (the backends file or model.toml)";
  for (const auto& [e, was] : reset) {
    const EndpointSlot& slot = endpoints->slot(e);
    Report(slot.breaker, {was, BreakerState::kClosed}, slot.endpoint.url, now, false, kNewRule);
  }
  if (breaker_changed) {
    const BreakerState was = backend_breaker->state(now);
    backend_breaker.emplace(config.remote.backend_breaker);
    if (was != BreakerState::kClosed) {
      Report(*backend_breaker, {was, BreakerState::kClosed}, "", now, false, kNewRule);
    }
  }
  RefreshGauges(now);
  StartChecks();
  UnsubscribeTrips();
  SubscribeTrips();
  StartQueued();  // more endpoints or connections: the waiting calls need not wait for an end
  std::fprintf(stderr, "pillar: model %s version %s now has %zu upstream endpoint%s\n",
               model_name.c_str(), version.c_str(), endpoints->size(),
               endpoints->size() == 1 ? "" : "s");
}

absl::Status RemoteRunner::Reconfigure(const models::RemoteConfig& remote) {
  models::RemoteConfig next = remote;
  // What stays with the signature, whatever the caller passed.
  const models::RemoteConfig& signed_remote = state_->signed_remote;
  next.model = signed_remote.model;
  next.version = signed_remote.version;
  next.idempotent = signed_remote.idempotent;
  next.credentials_file = signed_remote.credentials_file;
  next.ca_file = signed_remote.ca_file;
  next.client_certificate = signed_remote.client_certificate;
  next.client_key = signed_remote.client_key;
  if (next.endpoints.empty()) return absl::InvalidArgumentError("[remote] has no endpoints");
  if (next.hedge.enabled && !next.idempotent) {
    return absl::InvalidArgumentError("[remote.hedge] needs an idempotent model");
  }
  std::vector<Endpoint> parsed;
  bool any_tls = false;
  for (const models::RemoteEndpoint& spec : next.endpoints) {
    absl::StatusOr<Endpoint> endpoint = ParseEndpoint(spec.url);
    if (!endpoint.ok()) return endpoint.status();
    any_tls = any_tls || endpoint->tls;
    parsed.push_back(std::move(*endpoint));
  }
  std::shared_ptr<asio::ssl::context> tls;
  if (any_tls) {  // read here, off the runner's thread; used only if it has none yet
    absl::StatusOr<std::shared_ptr<asio::ssl::context>> made = MakeTlsContext(next);
    if (!made.ok()) return made.status();
    tls = std::move(*made);
  }
  asio::post(state_->io, [state = state_, next = std::move(next), parsed = std::move(parsed),
                          tls = std::move(tls)]() mutable {
    absl::MutexLock lock(&state->mu);
    state->ApplyReconfigure(std::move(next), std::move(parsed), std::move(tls));
  });
  return absl::OkStatus();
}

RemoteRunner::RemoteRunner(std::shared_ptr<State> state) : state_(std::move(state)) {
  asio::post(state_->io, [state = state_] {
    absl::MutexLock lock(&state->mu);
    state->SubscribeTrips();
    state->StartChecks();
    state->RefreshGauges(Clock::now());
    state->ScheduleGauges();
  });
  thread_ = std::thread([state = state_] {
    NameThisThread(StrCat("remote:", state->model_name));
    state->io.run();
  });
}

RemoteRunner::~RemoteRunner() {
  asio::post(state_->io, [state = state_] {
    absl::MutexLock lock(&state->mu);
    if (state->breaker_sync != nullptr) state->UnsubscribeTrips();
    state->Stop();
  });
  thread_.join();
}

std::optional<runtime::UpstreamStatus> RemoteRunner::Upstreams() const {
  absl::MutexLock lock(&state_->mu);
  return state_->Describe();
}

void RemoteRunner::Infer(protocol::InferenceRequest request, runtime::InferCallback done) {
  if (state_->config.platform == models::Platform::kOpenAi) {
    return std::move(done)(absl::FailedPreconditionError(
        "the model is a language model: call it on the OpenAI-compatible routes"));
  }
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
  std::shared_ptr<Cancellation> cancellation = std::move(request.cancellation);
  call->request = std::move(request);
  call->done = std::move(done);
  Start(std::move(call), cancellation);
}

void RemoteRunner::Generate(runtime::GenerateRequest request, runtime::InferCallback done) {
  if (state_->config.platform != models::Platform::kOpenAi) {
    return Runner::Generate(std::move(request), std::move(done));
  }
  auto call = std::make_shared<Call>();
  // The upstream's name for the model; the body parsed when the request arrived.
  // A stream asks for its usage, which pillar counts (the client gets the usage chunk only if it
  // asked for it too).
  if (request.set_max_tokens) call->set_max_tokens = request.max_tokens;
  absl::StatusOr<std::string> body = protocol::RewriteForUpstream(
      request.body, state_->upstream_model, request.stream, call->set_max_tokens);
  if (!body.ok()) return std::move(done)(body.status());
  call->body = std::move(*body);
  call->openai_route = request.route;
  call->client_body = std::move(request.body);
  call->events = std::move(request.events);
  call->request.deadline_ns = request.deadline_ns;
  call->request.priority = request.priority;
  call->request.caller = request.caller;
  call->request.principal = request.principal;
  call->done = std::move(done);
  Start(std::move(call), request.cancellation);
}

void RemoteRunner::Start(std::shared_ptr<Call> call,
                         const std::shared_ptr<Cancellation>& cancellation) {
  call->arrived = Clock::now();
  if (cancellation != nullptr && !cancellation->OnCancel([weak_state = std::weak_ptr<State>(state_),
                                                          weak_call = std::weak_ptr<Call>(call)] {
        const std::shared_ptr<State> state = weak_state.lock();
        const std::shared_ptr<Call> call = weak_call.lock();
        if (state == nullptr || call == nullptr) return;
        absl::MutexLock lock(&state->mu);
        state->AbandonOnItsLane(call);
      })) {
    return std::move(call->done)(absl::CancelledError("the client went away"));
  }
  if (asio::io_context* loop = ThisThreadEventLoop()) {  // a server loop: the call stays on it
    absl::MutexLock lock(&state_->mu);
    call->lane = state_->LaneOf(loop);
    return state_->Admit(std::move(call));
  }
  asio::post(state_->io, [state = state_, call = std::move(call)]() mutable {
    absl::MutexLock lock(&state->mu);
    state->Admit(std::move(call));
  });
}

}  // namespace pillar::upstream
