// RemoteRunner: breakers and health as they change (remote_state.h says how the files divide).
#include <chrono>
#include <cstdio>

#include "common/strings.h"
#include "runtime/admission.h"
#include "upstream/remote_state.h"

namespace pillar::upstream {
namespace {

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

// Records an attempt's outcome for its endpoint: health, breaker, metrics, logs. In the set now
// in force (review helper-108: recorded in a set a reload had replaced, the failures of attempts
// that ran across a reload were lost, and a backends file rewritten every few seconds kept a
// failing endpoint from ever being ejected).
void RemoteRunner::State::Record(const Attempt& attempt, AttemptOutcome outcome) {
  const std::optional<Ticket> ticket = InForce(attempt);
  if (!ticket) return;  // the endpoint left the set
  const Clock::time_point now = Clock::now();
  EndpointSet& set = *endpoints;
  const EndpointChange change = set.Finish(*ticket, outcome, now);
  const EndpointMetrics& m = set.slot(ticket->endpoint).metrics;
  using Outcome = EndpointHealth::Outcome;
  Count(change.outcome == Outcome::kSuccess     ? m.attempts_ok
        : change.outcome == Outcome::kThrottled ? m.attempts_throttled
        : change.outcome == Outcome::kFailure   ? m.attempts_failed
                                                : nullptr);
  Announce(set, change, now);
}

// What a request's answer says of the backend as a whole, for its breaker.
void RemoteRunner::State::RecordBackend(const Call& call, const absl::Status& status) {
  using Verdict = CircuitBreaker::Verdict;
  const Clock::time_point now = Clock::now();
  Verdict verdict = Verdict::kSuccess;
  std::chrono::milliseconds retry_after{0};
  // Nothing is learnt of the backend from a request cut off by its caller (or held back by a
  // client that did not read its stream), shed for its own
  // deadline, or refused by the upstream as the request's fault (a 4xx): otherwise a caller could
  // open the breaker for everyone with requests the upstream refuses.
  if (stopping || (!status.ok() &&
                   (call.CutByCaller() || call.held_by_client || call.abandoned ||
                    runtime::IsShedForDeadline(status) || runtime::IsRefusedUpstream(status)))) {
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

void RemoteRunner::State::BackendChanged(CircuitBreaker::Transition change, Clock::time_point now,
                                         bool from_peer) {
  Report(*backend_breaker, change, "", now, from_peer);
  if (metrics.breaker != nullptr) metrics.breaker->Set(double(change.to));
  if (change.to == BreakerState::kOpen) Count(metrics.trips);
  if (change.to == BreakerState::kOpen && !from_peer) {
    PublishTrip(BreakerName(""), backend_breaker->open_until(), now);
  }
}

// The name other instances know a breaker by: "<model>/<version>", and the endpoint's place
// (its URL in one spelling, models::EndpointPlace).
std::string RemoteRunner::State::BreakerName(std::string_view endpoint) const {
  return endpoint.empty() ? StrCat(model_name, "/", version)
                          : StrCat(model_name, "/", version, " ", endpoint);
}

void RemoteRunner::State::PublishTrip(const std::string& name, Clock::time_point until,
                                      Clock::time_point now) {
  if (breaker_sync == nullptr) return;
  const int64_t unix_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  breaker_sync->Publish(name, unix_now + MillisUntil(until, now));
}

// A trip of breaker `endpoint` ("" for the version's own) seen by another instance.
void RemoteRunner::State::OnPeerTrip(std::string_view endpoint, int64_t until_unix_ms) {
  if (stopping) return;
  const Clock::time_point now = Clock::now();
  const int64_t unix_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  // At most a day: a clock far off, or a bad message, does not shut a model for good.
  // Compared before subtracting, which could overflow for a message from far in the past.
  if (until_unix_ms <= unix_now) return;
  const int64_t left_ms =
      until_unix_ms - unix_now > 86'400'000 ? 86'400'000 : until_unix_ms - unix_now;
  const Clock::time_point until = now + std::chrono::milliseconds(left_ms);
  if (endpoint.empty()) {
    if (auto change = backend_breaker->Trip(until, now)) BackendChanged(*change, now, true);
    return;
  }
  for (size_t e = 0; e < endpoints->size(); ++e) {
    if (endpoints->slot(e).endpoint.place != endpoint) continue;
    EndpointChange change;
    change.endpoint = e;
    change.breaker = endpoints->TripFromPeer(e, until, now);
    if (change.breaker) Announce(*endpoints, change, now, /*from_peer=*/true);
  }
}

// A breaker's change of state: one log line and one audit record. `endpoint` is empty for
// the backend's own breaker.
void RemoteRunner::State::Report(const CircuitBreaker& breaker, CircuitBreaker::Transition change,
                                 std::string_view endpoint, Clock::time_point now, bool from_peer,
                                 std::string_view closed_by) {
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
      : closed_by.empty()
          ? StrCat("circuit breaker of ", scope, " closed: its half-open probes succeeded")
          : StrCat("circuit breaker of ", scope, " closed: ", closed_by);
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

// Logs, counts and audits what an endpoint's change says.
void RemoteRunner::State::Announce(EndpointSet& set, const EndpointChange& change,
                                   Clock::time_point now, bool from_peer) {
  EndpointSlot& slot = set.slot(change.endpoint);
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
      PublishTrip(BreakerName(slot.endpoint.place), slot.breaker.open_until(), now);
    }
  }
}

// An active health check's result.
void RemoteRunner::State::OnCheck(size_t e, bool passed, std::string_view why) {
  if (stopping) return;
  const EndpointChange change = endpoints->RecordCheck(e, passed);
  if (change.failed_checks) {
    std::fprintf(stderr, "pillar: upstream %s is out of service: its health checks fail (%s)\n",
                 endpoints->slot(e).endpoint.url.c_str(), Redact(why).c_str());
  }
  Announce(*endpoints, change, Clock::now());
}

}  // namespace pillar::upstream
