// RemoteRunner: what an attempt's reply means for its call (remote_state.h says how the files
// divide): an answer, a failed attempt that moves on to another endpoint, or the call's end.
#include "common/strings.h"
#include "runtime/admission.h"
#include "runtime/signature.h"
#include "upstream/remote_state.h"

namespace pillar::upstream {

void RemoteRunner::State::OnReply(
    std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
    absl::StatusOr<UpstreamReply> reply, CallFailure failure,
    std::optional<absl::StatusOr<protocol::InferenceResponse>> decoded,
    std::optional<absl::StatusOr<protocol::ReplyUsage>> usage) {
  if (attempt->cancelled) {  // another attempt answered; this one was cut off on purpose
    return Record(
        *attempt,
        {.kind = AttemptOutcome::kTimeout, .status = 0, .retry_after_s = 0, .cut_by_caller = true});
  }
  if (!reply.ok()) {
    return OnNoReply(std::move(call), std::move(attempt), reused, reply.status(), failure);
  }
  if (reused && reply->status == 408 && !stopping && config.remote.idempotent) {
    // The upstream timed the idle connection out as the request went out: nothing was done, as
    // far as a 408 can be believed; a model that is not idempotent is not risked on it (review
    // helper-103: an upstream that read the request, then answered 408, got it twice).
    return Open(std::move(call), std::move(attempt));
  }
  // Its connection goes back to the endpoint in force (closed when the endpoint left the set).
  const std::optional<Ticket> in_force = InForce(*attempt);
  EndpointSlot& slot =
      in_force ? endpoints->slot(in_force->endpoint) : attempt->set->slot(attempt->ticket.endpoint);
  if (attempt->connection->open() && !stopping) {
    if (in_force) {
      ReturnIdle(slot, call->lane, attempt->connection);
    } else {
      attempt->connection->Close();
    }
  }
  if (reply->status == 200 && attempt->relay) return OnStreamEnd(std::move(call), attempt);
  if (reply->status == 200 && usage) {
    return OnGenerated(std::move(call), std::move(attempt), std::move(reply->body),
                       std::move(*usage));
  }
  if (reply->status == 200) {
    return OnOk(std::move(call), std::move(attempt), reused, std::move(*decoded));
  }
  // A 429 is a throttle; a 503 only with a positive Retry-After to keep (docs/resilience.md):
  // without one it is a failure like another 5xx, as endpoint health counts it (reviews
  // helper-126 and 127: it was answered 503 "busy").
  const bool throttled =
      reply->status == 429 || (reply->status == 503 && reply->retry_after_s.value_or(0) > 0);
  // A pillar upstream that refused only because this caller's deadline is too short for its
  // queue: nothing against the endpoint, and no pause for the others' requests. Believed only
  // for a caller that set a deadline of its own (else it is a plain 503 and pauses the endpoint),
  // and taken as what it says of the endpoint's speed: it cannot answer within the time it was
  // given, so the balancer sends it less.
  const bool shed_for_caller =
      reply->status == 503 && reply->shed_for_deadline && call->caller_deadline;
  if (shed_for_caller) {
    const double budget_s = double(attempt->budget_ms) / 1e3;
    slot.latency_s = slot.latency_s == 0 ? budget_s : 0.9 * slot.latency_s + 0.1 * budget_s;
  } else {
    call->all_shed_for_deadline = false;
  }
  if (throttled && reply->retry_after_s) {
    // What a shed says is about this caller's deadline: passed on, but never beyond a minute.
    const int64_t said =
        shed_for_caller ? std::min<int64_t>(*reply->retry_after_s, 60) : *reply->retry_after_s;
    call->retry_after = std::min(call->retry_after.value_or(INT64_MAX), said);
  }
  Record(*attempt,
         {.kind = AttemptOutcome::kStatus,
          .status = reply->status,
          .retry_after_s = reply->retry_after_s.value_or(0),
          .cut_by_caller = shed_for_caller || (reply->status == 504 && call->caller_deadline)});
  if (reply->status >= 500 || reply->status == 429) {
    Failed(*call, *attempt, StrCat("answered ", reply->status), throttled);
    return AttemptFailed(std::move(call), attempt);
  }
  // Any other status: the upstream refused the request itself, which another replica of the
  // same model would refuse too.
  std::erase(call->live, attempt);
  Complete(*call, runtime::RefusedUpstream(
                      StrCat("upstream ", slot.endpoint.url, " answered ", reply->status)));
}

// An attempt that got no reply: a stale connection, a connect or read failure, the deadline, a
// stream the relay stopped (a bad chunk, or a client gone).
void RemoteRunner::State::OnNoReply(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt,
                                    bool reused, const absl::Status& status, CallFailure failure) {
  // A kept-alive connection the upstream had closed meanwhile: nothing reached it, so the same
  // endpoint gets the request again on a new connection, not a failure. After a write, not for
  // a model that is not idempotent: the request may have been read before the close.
  const bool not_sent = failure == CallFailure::kNotSent ||
                        (failure == CallFailure::kBeforeReply && config.remote.idempotent);
  // Never a call whose client has part of its answer, or all of it.
  const bool answered = call->completed || call->committed.load();
  if (reused && not_sent && !stopping && !answered)
    return Open(std::move(call), std::move(attempt));
  const bool timed_out = failure == CallFailure::kDeadline;
  const StreamRelay* relay = attempt->relay.get();
  if (relay != nullptr && relay->cancelled()) {  // the client went away: nobody's fault here
    Record(
        *attempt,
        {.kind = AttemptOutcome::kTimeout, .status = 0, .retry_after_s = 0, .cut_by_caller = true});
    std::erase(call->live, attempt);
    return Complete(*call, absl::CancelledError("the client went away"));
  }
  const bool bad_stream = relay != nullptr && !relay->error().empty();
  // A stream cut by the deadline after its events had waited for the client a quarter of the
  // time the upstream has had since the attempt was sent: the upstream is read only as fast as
  // the client takes events, so the deadline is the client's. An endpoint whose streams take at
  // most three quarters of the deadline is thus never charged for how a client reads, however
  // the client times it (review helper-105: judged by the half of the time since the first
  // event, a client that read fast to just past the midpoint, then in small bursts, got a
  // healthy endpoint ejected; the rules before it, helpers 101, 103, 104); and an upstream that
  // stalls, or streams without end, is charged when the client took what it was sent (the
  // client's time is what the connection's writes waited for its socket, not pillar's own
  // hand-offs: StreamRelay::client_time; review helper-106).
  if (timed_out && relay != nullptr) {
    const Clock::time_point now = Clock::now();
    call->held_by_client = relay->client_time(now) * 4 >= now - relay->sent_at();
  }
  Record(*attempt, {.kind = bad_stream  ? AttemptOutcome::kBadReply
                            : timed_out ? AttemptOutcome::kTimeout
                                        : AttemptOutcome::kConnect,
                    .status = 0,
                    .retry_after_s = 0,
                    // The caller's deadline says nothing of the endpoint, before [DONE] or
                    // after it (review helper-102: a short one, run out while the body's end
                    // was on its way, had the endpoint charged and ejected); the model's own
                    // deadline and the second after [DONE] (kBodyEndAfterDone) do.
                    .cut_by_caller = timed_out && (call->CutByCaller() || call->held_by_client)});
  // The client took [DONE]: its call was answered then (OnDoneTaken), and nothing follows it,
  // however the body then ends (review helper-99); what the body did counts against the
  // endpoint above (review helper-100).
  if (relay != nullptr && relay->delivered_done()) return;
  Failed(*call, *attempt,
         bad_stream ? relay->error()
         : call->held_by_client
             ? std::string("the client did not take the stream before the deadline")
             : ToStd(status.message()),
         false);
  return AttemptFailed(std::move(call), attempt);
}

// A 200: decoded, matched to the request and the model's outputs, or a failed attempt.
void RemoteRunner::State::OnOk(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt,
                               bool reused, absl::StatusOr<protocol::InferenceResponse> decoded) {
  // A reply without an id is taken from a server that has never echoed one (the protocol asks
  // for the echo, not every server gives it; such a server has the idle checks and OutOfStep's
  // protection only), not from one that has (docs/formats/model_store.md).
  const std::optional<Ticket> in_force = InForce(*attempt);
  EndpointSlot& slot =
      in_force ? endpoints->slot(in_force->endpoint) : attempt->set->slot(attempt->ticket.endpoint);
  if (decoded.ok() && !decoded->id.empty() && decoded->id == call->upstream_id) {
    slot.echoes_id = true;
  }
  // Without an id, from an endpoint whose replies carry one, on a connection that carried a call
  // before: a stray, or a server that omits it now and then; a new connection tells them apart
  // (nothing can be out of step on it), so the request goes there, and the endpoint is not
  // called out of step for it.
  const bool missing_id = decoded.ok() && decoded->id.empty() && slot.echoes_id && reused;
  if (decoded.ok() && (missing_id || (!decoded->id.empty() && decoded->id != call->upstream_id))) {
    // The reply may answer another request: the connection is out of step with its upstream.
    attempt->connection->Close();
    if (!missing_id) OutOfStep(slot);
    if (reused && !stopping && config.remote.idempotent) {
      return Open(std::move(call), std::move(attempt));
    }
    // Quoted whole or not at all: a value cut short is one no screen would recognize.
    decoded = absl::InvalidArgumentError(
        decoded->id.empty() ? std::string("the reply has no id, where this upstream's have")
        : decoded->id.size() <= 64
            ? StrCat("the reply's id '", decoded->id, "' is not the request's")
            : StrCat("the reply's id (", decoded->id.size(), " bytes) is not the request's"));
  }
  absl::StatusOr<std::vector<protocol::Tensor>> outputs =
      decoded.ok() ? runtime::MatchOutputs(config, call->rows, call->request.requested_outputs,
                                           std::move(decoded->outputs))
                   : absl::StatusOr<std::vector<protocol::Tensor>>(decoded.status());
  if (!outputs.ok()) {
    return Unusable(std::move(call), attempt,
                    StrCat("a reply pillar cannot use: ", outputs.status().message()));
  }
  runtime::InferResult result;
  result.outputs = std::move(*outputs);
  Answered(std::move(call), attempt, std::move(result));
}

// A 200 that answers the call: the attempt won, the others are cut off.
void RemoteRunner::State::Answered(std::shared_ptr<Call> call,
                                   const std::shared_ptr<Attempt>& attempt,
                                   runtime::InferResult result) {
  Record(*attempt,
         {.kind = AttemptOutcome::kOk, .status = 200, .retry_after_s = 0, .cut_by_caller = false});
  if (attempt->hedge) Count(metrics.hedge_wins);
  std::erase(call->live, attempt);
  CancelOthers(*call, attempt.get());
  Complete(*call, std::move(result));
}

// A 200 that is no answer (a body pillar cannot use, a stream cut short): a failed attempt.
void RemoteRunner::State::Unusable(std::shared_ptr<Call> call,
                                   const std::shared_ptr<Attempt>& attempt, std::string_view why) {
  Record(*attempt, {.kind = AttemptOutcome::kBadReply,
                    .status = 200,
                    .retry_after_s = 0,
                    .cut_by_caller = false});
  Failed(*call, *attempt, why, false);
  AttemptFailed(std::move(call), attempt);
}

// A language model's 200, checked on the thread that read it: passed on as it came, or a failed
// attempt (a 200 with an error inside, or one without its choices, is not an answer).
void RemoteRunner::State::OnGenerated(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt,
                                      std::string body,
                                      absl::StatusOr<protocol::ReplyUsage> usage) {
  if (!usage.ok()) {
    return Unusable(std::move(call), attempt,
                    StrCat("a reply pillar cannot use: ", usage.status().message()));
  }
  runtime::InferResult result;
  result.body = std::move(body);
  result.usage = usage->usage;
  result.usage_reported = usage->reported;
  Answered(std::move(call), attempt, std::move(result));
}

}  // namespace pillar::upstream
