// RemoteRunner: one request's attempts (remote_state.h says how the files divide).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <cstdio>

#include "common/strings.h"
#include "protocol/openai_request.h"
#include "runtime/admission.h"
#include "runtime/signature.h"
#include "upstream/remote_state.h"

namespace pillar::upstream {
namespace {

constexpr size_t kLargeReplyBytes = 1 << 20;
// The header in which pillar tells an upstream how long it will wait (http::kTimeoutHeader, which
// a pillar upstream reads; upstream/ does not include http/).
constexpr char kTimeoutHeader[] = "X-Pillar-Timeout-Ms";
// Attempt latencies kept for the hedge's quantile, and how many it needs first.
constexpr size_t kLatencyWindow = 256;
constexpr size_t kLatenciesForHedging = 20;

// A 200's body, decoded on the thread that read it, outside the runner's lock. Each thread's
// decoder keeps the capacity of the largest document it parsed: a large reply gets a decoder of
// its own, so that one does not pin its size for the life of the thread.
[[nodiscard]] absl::StatusOr<protocol::InferenceResponse> DecodeReply(const std::string& body) {
  if (body.size() > kLargeReplyBytes) return protocol::InferenceResponseDecoder().Decode(body);
  thread_local protocol::InferenceResponseDecoder decoder;
  return decoder.Decode(body);
}

// Whether a reply answers its call: a 200 pillar can use, a stream whole to [DONE]. Only such a
// reply says how fast its endpoint answers (review helper-106: a 200 that ended before [DONE]
// made a failing endpoint look fast to the picker until it was ejected).
bool Answers(const absl::StatusOr<UpstreamReply>& reply, const Attempt& attempt,
             const std::optional<absl::StatusOr<protocol::InferenceResponse>>& decoded,
             const std::optional<absl::StatusOr<protocol::ReplyUsage>>& usage) {
  if (!reply.ok() || reply->status != 200) return false;
  if (attempt.relay != nullptr) return attempt.relay->done() && attempt.relay->error().empty();
  if (decoded) return decoded->ok();
  return usage && usage->ok();
}

}  // namespace

// Text that came from an upstream (an error it put in a reply, a name) on its way to a client and
// the logs: cut short, and without the token, which an upstream may echo back.
std::string RemoteRunner::State::Redact(std::string_view text) const {
  constexpr size_t kShown = 512;
  // Only what can be shown is read: a copy of the token that begins in it ends in the next
  // token-length bytes, and an error body of megabytes costs no more than a short one.
  const size_t token_bytes = token ? token->view().size() : 0;
  text = text.substr(0, std::min(text.size(), kShown + token_bytes));
  std::string out = redactor ? redactor->Redact(text) : std::string(text);
  if (out.size() > kShown) out.resize(kShown);
  return out;
}

// A place in the retry budget (Envoy's): at most max(min_retry_concurrency, retry_budget_percent
// of the calls in flight) calls retry or hedge at once. A call keeps its place to its end.
bool RemoteRunner::State::TakeRetryPlace(Call& call) {
  if (call.retrying) return true;
  const models::RemoteConfig& remote = config.remote;
  const int64_t allowance = std::max<int64_t>(remote.min_retry_concurrency,
                                              in_flight * remote.retry_budget_percent / 100);
  if (retrying >= allowance) {
    Count(metrics.budget_exhausted);
    return false;
  }
  call.retrying = true;
  ++retrying;
  return true;
}

// Whether `call`, which has failed an attempt, may try again: a non-idempotent request that may
// have reached an upstream may not; the budget must have a place; the back-off must end before
// the deadline. Returns the wait before the next attempt, or the status to end the call with.
absl::StatusOr<std::chrono::milliseconds> RemoteRunner::State::RetryWait(Call& call,
                                                                         Clock::time_point now) {
  const models::RemoteConfig& remote = config.remote;
  if (!remote.idempotent && call.sent) return Exhausted(call);
  // A retry after a connection that could not be made costs the upstreams nothing (the budget
  // is there so that retries cannot multiply their load): it takes no place.
  if (!call.last_was_refused_connection && !TakeRetryPlace(call)) {
    call.last_error += " (not retried: the retry budget is spent)";
    return Exhausted(call);
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
bool RemoteRunner::State::AnyLeft(Call& call, Clock::time_point now) {
  SyncTried(call);
  for (size_t e = 0; e < endpoints->size(); ++e) {
    if (!call.tried[e] && endpoints->slot(e).breaker.WouldAdmit(now) &&
        !endpoints->slot(e).health.Throttled(now)) {
      return true;
    }
  }
  return false;
}

// Maps what `call` tried onto the endpoints in service: by place (URL), when the set changed since
// (Reconfigure), so that an endpoint kept across a change is still not tried twice.
void RemoteRunner::State::SyncTried(Call& call) {
  if (call.tried_in == endpoints) return;
  std::vector<bool> tried(endpoints->size(), false);
  if (call.tried_in != nullptr) {
    for (size_t old = 0; old < call.tried_in->size() && old < call.tried.size(); ++old) {
      if (!call.tried[old]) continue;
      const std::string& place = call.tried_in->slot(old).endpoint.place;
      for (size_t e = 0; e < endpoints->size(); ++e) {
        if (endpoints->slot(e).endpoint.place == place) tried[e] = true;
      }
    }
  }
  call.tried = std::move(tried);
  call.tried_in = endpoints;
}

// The call's next attempt: the first, or a retry after a back-off; or its end.
void RemoteRunner::State::TryNext(std::shared_ptr<Call> call) {
  if (call->completed) return;  // abandoned by its client while it moved to its loop
  if (stopping) return Complete(*call, absl::UnavailableError("model is unloading"));
  const Clock::time_point now = Clock::now();
  if (now >= call->deadline) return Complete(*call, TimedOut(*call));
  if (call->attempts == 0 && call->queued && !call->promised) {
    // Out of the queue, under load (so the estimate is being refreshed by calls that end): one
    // that can no longer be answered in time is not sent. A call admitted at once is always sent:
    // an estimate from a slow spell long past must not refuse it, and its end refreshes it.
    if (std::optional<absl::Status> refused = DeadlineRefusal(*call, 0)) {
      return Complete(*call, std::move(*refused));
    }
  }
  if (call->attempts > 0 && AnyLeft(*call, now)) {
    absl::StatusOr<std::chrono::milliseconds> wait = RetryWait(*call, now);
    if (!wait.ok()) return Complete(*call, wait.status());
    Count(metrics.retries);
    if (wait->count() > 0) {
      auto timer = std::make_shared<asio::steady_timer>(*lanes[call->lane], *wait);
      timers.insert(timer);
      timer->async_wait([self = shared_from_this(), call, timer](boost::system::error_code) {
        absl::MutexLock lock(&self->mu);
        self->timers.erase(timer);
        self->StartAttempt(call, /*hedge=*/false);
      });
      return;
    }
  }
  StartAttempt(std::move(call), /*hedge=*/false);
}

void RemoteRunner::State::StartAttempt(std::shared_ptr<Call> call, bool hedge) {
  if (call->completed) return;
  if (stopping) return Complete(*call, absl::UnavailableError("model is unloading"));
  const Clock::time_point now = Clock::now();
  if (now >= call->deadline) return Complete(*call, TimedOut(*call));
  SyncTried(*call);
  std::optional<Ticket> ticket = endpoints->Start(call->tried, now);
  if (!ticket) {
    if (hedge) return;               // nobody to race: the first attempt goes on alone
    if (call->last_error.empty()) {  // nothing tried: every endpoint is out or throttled
      return Complete(*call, runtime::UnavailableWithRetry(
                                 "every upstream endpoint is out of service or asked for a pause",
                                 endpoints->WaitForAnEndpoint(call->tried, now).count()));
    }
    return Complete(*call, Exhausted(*call));
  }
  ++call->attempts;
  auto attempt = std::make_shared<Attempt>();
  attempt->ticket = *ticket;
  attempt->set = endpoints;
  attempt->hedge = hedge;
  call->tried[ticket->endpoint] = true;
  call->live.push_back(attempt);
  if (hedge) {
    ++call->hedges;
    Count(metrics.hedges);
  }
  EndpointSlot& slot = attempt->set->slot(ticket->endpoint);
  if (slot.idle.size() > call->lane && !slot.idle[call->lane].empty()) {
    return Dispatch(std::move(call), std::move(attempt));
  }
  // None idle on the call's loop, while the endpoint has all the connections it may keep and one
  // idles on another loop: the call moves there rather than open one more, which would then
  // close that one (a new connection per request when loops outnumber `connections`). Only a
  // call with no other attempt and no hedge timer moves: all of a call's I/O is on one loop.
  if (call->live.size() == 1 && !call->hedge_timer &&
      slot.idle_count + *slot.outstanding >= config.remote.connections) {
    for (size_t lane = 0; lane < slot.idle.size(); ++lane) {
      if (lane == call->lane || slot.idle[lane].empty()) continue;
      call->lane = lane;
      asio::post(*lanes[lane], [self = shared_from_this(), call, attempt]() mutable {
        absl::MutexLock lock(&self->mu);
        self->Dispatch(std::move(call), std::move(attempt));
      });
      return;
    }
  }
  Dispatch(std::move(call), std::move(attempt));
}

void RemoteRunner::State::Dispatch(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt) {
  if (call->completed || attempt->cancelled || stopping) {  // while it moved to its loop
    Record(*attempt, {.kind = AttemptOutcome::kTimeout,
                      .status = 0,
                      .retry_after_s = 0,
                      .cut_by_caller = true});  // frees its probe places
    std::erase(call->live, attempt);
    if (!call->completed) Complete(*call, absl::UnavailableError("model is unloading"));
    return;
  }
  if (!attempt->hedge) ArmHedge(call);
  if (std::shared_ptr<UpstreamConnection> idle =
          TakeIdle(attempt->set->slot(attempt->ticket.endpoint), call->lane)) {
    attempt->connection = std::move(idle);
    return Send(std::move(call), std::move(attempt), true);
  }
  Open(std::move(call), std::move(attempt));
}

// When hedging is on, a second attempt to another endpoint if this call's attempts have not
// answered after the hedge delay, with a place in the retry budget.
void RemoteRunner::State::ArmHedge(const std::shared_ptr<Call>& call) {
  const models::HedgeConfig& hedge = config.remote.hedge;
  // A stream is not hedged: two would race to the client.
  if (!hedge.enabled || call->hedges >= hedge.max_hedges || call->hedge_timer || call->events) {
    return;
  }
  std::optional<std::chrono::milliseconds> delay = HedgeDelay();
  if (!delay || Clock::now() + *delay >= call->deadline) return;
  call->hedge_timer = std::make_shared<asio::steady_timer>(*lanes[call->lane], *delay);
  timers.insert(call->hedge_timer);
  call->hedge_timer->async_wait([self = shared_from_this(), call](boost::system::error_code ec) {
    absl::MutexLock lock(&self->mu);
    self->timers.erase(call->hedge_timer);
    call->hedge_timer.reset();
    if (ec || call->completed || call->live.empty() || self->stopping) return;
    if (!self->AnyLeft(*call, Clock::now()) || !self->TakeRetryPlace(*call)) return;
    self->StartAttempt(call, /*hedge=*/true);
    if (call->hedges < self->config.remote.hedge.max_hedges) self->ArmHedge(call);
  });
}

void RemoteRunner::State::NoteLatency(double seconds) {
  if (latencies.size() < kLatencyWindow) {
    latencies.push_back(seconds);
  } else {
    latencies[next_latency] = seconds;
    next_latency = (next_latency + 1) % kLatencyWindow;
  }
}

// The configured quantile of the latest attempt latencies, at least min_delay_ms; none until
// enough are known.
std::optional<std::chrono::milliseconds> RemoteRunner::State::HedgeDelay() {
  if (latencies.size() < kLatenciesForHedging) return std::nullopt;
  std::vector<double> sorted = latencies;
  const size_t k =
      std::min(sorted.size() - 1, size_t(double(sorted.size()) * config.remote.hedge.quantile));
  std::nth_element(sorted.begin(), sorted.begin() + ptrdiff_t(k), sorted.end());
  const auto quantile =
      std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(sorted[k]));
  return std::max(quantile, std::chrono::milliseconds(config.remote.hedge.min_delay_ms));
}

void RemoteRunner::State::Open(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt) {
  const Clock::time_point connect_deadline = std::min(
      call->deadline, Clock::now() + std::chrono::milliseconds(config.remote.connect_timeout_ms));
  attempt->connecting = Connect(
      *lanes[call->lane], attempt->set->slot(attempt->ticket.endpoint).endpoint, tls,
      connect_deadline,
      [self = shared_from_this(), call,
       attempt](absl::StatusOr<std::shared_ptr<UpstreamConnection>> connection) mutable {
        absl::MutexLock lock(&self->mu);
        attempt->connecting.reset();
        if (self->stopping || attempt->cancelled) {
          if (connection.ok()) (*connection)->Close();
          self->Record(*attempt, {.kind = AttemptOutcome::kTimeout,
                                  .status = 0,
                                  .retry_after_s = 0,
                                  .cut_by_caller = true});  // frees its probe places
          if (self->stopping) self->Complete(*call, absl::UnavailableError("model is unloading"));
          return;
        }
        if (!connection.ok()) {
          const bool timed_out = connection.status().code() == absl::StatusCode::kDeadlineExceeded;
          self->Record(*attempt,
                       {.kind = timed_out ? AttemptOutcome::kTimeout : AttemptOutcome::kConnect,
                        .status = 0,
                        .retry_after_s = 0,
                        .cut_by_caller = call->CutByCaller()});
          self->Failed(*call, *attempt, ToStd(connection.status().message()), false);
          call->last_was_refused_connection = !timed_out;
          return self->AttemptFailed(std::move(call), attempt);
        }
        attempt->connection = std::move(*connection);
        attempt->connection->OnUnaskedWhileIdle(
            [weak = std::weak_ptr<State>(self),
             place = attempt->set->slot(attempt->ticket.endpoint).endpoint.place] {
              std::shared_ptr<State> state = weak.lock();
              if (state == nullptr) return;
              absl::MutexLock lock(&state->mu);
              // In the endpoints now in force: a reload carries idle connections over.
              for (size_t e = 0; state->endpoints && e < state->endpoints->size(); ++e) {
                EndpointSlot& slot = state->endpoints->slot(e);
                if (slot.endpoint.place == place) state->OutOfStep(slot);
              }
            });
        self->Send(std::move(call), std::move(attempt), false);
      });
}

void RemoteRunner::State::Send(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt,
                               bool reused) {
  EndpointSlot& slot = attempt->set->slot(attempt->ticket.endpoint);
  const Endpoint& endpoint = slot.endpoint;
  // What this attempt has: what is left of the deadline, or of attempt_timeout_ms when that ends
  // sooner (the attempt is cut off then), so that the upstream does not work for nobody (another
  // pillar reads it; other servers ignore it; review helper-93: an attempt cut at 300 ms told the
  // upstream it had 10 s).
  const Clock::time_point sent = Clock::now();
  const int64_t attempt_ms = config.remote.attempt_timeout_ms;
  const Clock::time_point until =
      attempt_ms > 0 ? std::min(call->deadline, sent + std::chrono::milliseconds(attempt_ms))
                     : call->deadline;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - sent);
  attempt->budget_ms = std::max<int64_t>(1, left.count());
  char budget[24];
  const std::string_view budget_text(
      budget,
      size_t(std::to_chars(budget, budget + sizeof budget, attempt->budget_ms).ptr - budget));
  auto request = std::make_shared<UpstreamRequest>();
  const std::string path = TargetFor(*call, *attempt, slot);
  request->body = attempt->body.empty() ? std::string_view(call->body) : attempt->body;
  request->resend_safe = config.remote.idempotent;
  request->head = RequestHead("POST", StrCat(endpoint.base_path, path), endpoint.host_header,
                              {{"Content-Type", "application/json"},
                               {"User-Agent", "pillar"},
                               {credential ? std::string_view(credential->header) : "Authorization",
                                credential ? credential->value.view() : ""},
                               {kTimeoutHeader, budget_text}},
                              request->body.size());
  call->sent = true;
  if (call->events) attempt->relay = RelayFor(call, attempt);
  busy.emplace(attempt->connection, call->lane);
  ++*slot.outstanding;
  if (slot.metrics.outstanding != nullptr) slot.metrics.outstanding->Add(1);
  // The write runs once the lock is released: on loopback a send also runs the receiver's side
  // of TCP, long enough that the other event loops, whose calls need this lock, were seen to
  // queue on it and sleep. Send runs on the call's lane, so this is that loop's next task.
  asio::io_context& lane = *lanes[call->lane];  // before `call` moves into the task
  asio::post(lane, [self = shared_from_this(), call = std::move(call), attempt = std::move(attempt),
                    request = std::move(request), until, reused, sent,
                    max_bytes = config.remote.max_response_bytes]() mutable {
    UpstreamConnection* raw = attempt->connection.get();
    std::shared_ptr<BodySink> relay = attempt->relay;
    raw->Call(
        std::move(request), until, max_bytes,
        [self = std::move(self), call = std::move(call), attempt = std::move(attempt), reused,
         sent](absl::StatusOr<UpstreamReply> reply, CallFailure failure) mutable {
          // A 200 is read here, outside the lock: decoded, or (a language model's) checked.
          std::optional<absl::StatusOr<protocol::InferenceResponse>> decoded;
          std::optional<absl::StatusOr<protocol::ReplyUsage>> usage;
          if (reply.ok() && reply->status == 200 && !call->events) {
            if (call->openai_route) {
              usage = protocol::CheckGeneratedReply(
                  reply->body, *call->openai_route == runtime::OpenAiRoute::kEmbeddings);
            } else {
              decoded = DecodeReply(reply->body);
            }
          }
          const bool answered = Answers(reply, *attempt, decoded, usage);
          absl::MutexLock lock(&self->mu);
          self->Returned(*attempt, sent, answered);
          // A call answered at [DONE] gives its place back once OnReply, which takes them, has
          // recorded the body's end.
          std::shared_ptr<Call> lingering;
          std::shared_ptr<Attempt> lingering_attempt;
          if (attempt->linger_timer != nullptr) {
            lingering = call;
            lingering_attempt = attempt;
          }
          self->OnReply(std::move(call), std::move(attempt), reused, std::move(reply), failure,
                        std::move(decoded), std::move(usage));
          if (lingering != nullptr) self->EndLinger(*lingering, *lingering_attempt);
        },
        std::move(relay));
  });
}

std::optional<Ticket> RemoteRunner::State::InForce(const Attempt& attempt) const {
  if (attempt.set == endpoints) return attempt.ticket;
  const std::string& place = attempt.set->slot(attempt.ticket.endpoint).endpoint.place;
  for (size_t e = 0; e < endpoints->size(); ++e) {
    if (endpoints->slot(e).endpoint.place != place) continue;
    Ticket ticket = attempt.ticket;
    ticket.endpoint = e;
    return ticket;
  }
  return std::nullopt;
}

void RemoteRunner::State::Returned(const Attempt& attempt, Clock::time_point sent, bool answered) {
  busy.erase(attempt.connection);
  // Its place among the outstanding is given back where it was taken (a count the set in force
  // shares when its endpoint stayed through a reload).
  EndpointSlot& chosen = attempt.set->slot(attempt.ticket.endpoint);
  --*chosen.outstanding;
  const EndpointMetrics& m = chosen.metrics;
  if (m.outstanding != nullptr) m.outstanding->Add(-1);
  // What it showed of its endpoint goes to the endpoint in force (none: it left the set).
  const std::optional<Ticket> in_force = InForce(attempt);
  EndpointSlot* slot = in_force ? &endpoints->slot(in_force->endpoint) : nullptr;
  if (slot != nullptr && attempt.connection->unasked_bytes()) OutOfStep(*slot);
  if (answered) {  // a fast error is not a fast endpoint
    // A stream's time is the upstream's own: not the client's reading pace (review helper-103:
    // a slow reader made an endpoint look ten times slower and sent traffic away from it), nor
    // the body's tail after [DONE].
    const Clock::time_point now = Clock::now();
    const double seconds =
        std::chrono::duration<double>(attempt.relay ? attempt.relay->UpstreamTime(now) : now - sent)
            .count();
    // A moving average over about the last ten replies, for the picker.
    if (slot != nullptr) {
      slot->latency_s = slot->latency_s == 0 ? seconds : 0.9 * slot->latency_s + 0.1 * seconds;
    }
    if (m.latency != nullptr) m.latency->Observe(seconds);
    NoteLatency(seconds);
  }
}

std::string RemoteRunner::State::TargetFor(const Call& call, Attempt& attempt,
                                           const EndpointSlot& slot) {
  if (!call.openai_route) return target;
  attempt.body.clear();
  if (!slot.model.empty() && slot.model != upstream_model) {
    // The body parsed when the request arrived, so it parses again.
    absl::StatusOr<std::string> body = protocol::RewriteForUpstream(
        call.client_body, slot.model, call.events != nullptr, call.set_max_tokens);
    if (body.ok()) attempt.body = std::move(*body);
  }
  return StrCat(runtime::OpenAiPath(*call.openai_route), query);
}

void RemoteRunner::State::AttemptFailed(std::shared_ptr<Call> call,
                                        const std::shared_ptr<Attempt>& attempt) {
  std::erase(call->live, attempt);
  if (call->completed || !call->live.empty()) return;  // a hedge of it is still out
  // Part of a streamed answer reached the client: no other endpoint may take over.
  if (call->committed.load()) return Complete(*call, runtime::BadGateway(call->last_error));
  TryNext(std::move(call));
}

// Cuts off the call's attempts still in flight but `winner`: their connections close, which is
// how HTTP tells a server to stop, and their outcomes count for nothing.
void RemoteRunner::State::CancelOthers(Call& call, const Attempt* winner) {
  std::vector<std::shared_ptr<Attempt>> others;
  others.swap(call.live);
  for (const std::shared_ptr<Attempt>& other : others) {
    if (other.get() == winner) continue;
    other->cancelled = true;
    if (other->connection) other->connection->Close();
    // One still connecting ends now, not at connect_timeout_ms: the call's place goes to the
    // next, which must not find the endpoint's connections taken by calls nobody waits for
    // (review helper-94: six clients that left during a hanging TLS handshake held six
    // connections to an endpoint of `connections = 1`).
    if (other->connecting) other->connecting->Close();
  }
}

void RemoteRunner::State::Failed(Call& call, const Attempt& attempt, std::string_view why,
                                 bool throttled) {
  call.last_was_refused_connection = false;  // the connect failure path sets it after this
  call.last_error = StrCat("upstream ", attempt.set->slot(attempt.ticket.endpoint).endpoint.url,
                           ": ", Redact(why));
  if (!throttled) call.all_throttled = call.all_shed_for_deadline = false;
}

absl::Status RemoteRunner::State::TimedOut(const Call& call) const {
  const std::string limit = call.caller_deadline ? std::string("the caller's deadline")
                                                 : StrCat(config.remote.timeout_ms, " ms");
  return absl::DeadlineExceededError(
      StrCat("no answer from the upstream within ", limit,
             call.last_error.empty() ? "" : StrCat(" (", call.last_error, ")")));
}

absl::Status RemoteRunner::State::Exhausted(const Call& call) const {
  if (call.all_throttled && call.all_shed_for_deadline) {  // passed on as it came
    return runtime::Shed(
        StrCat("every upstream's queue is longer than the deadline (", call.last_error, ")"),
        std::max<int64_t>(1, call.retry_after.value_or(1)), /*for_deadline=*/true);
  }
  if (call.all_throttled) {
    return runtime::UnavailableWithRetry(StrCat("every upstream is busy (", call.last_error, ")"),
                                         std::max<int64_t>(1, call.retry_after.value_or(1)));
  }
  return runtime::BadGateway(call.last_error);
}

}  // namespace pillar::upstream
