#include "upstream/endpoint_set.h"

#include <algorithm>
#include <map>
#include <utility>

namespace pillar::upstream {
namespace {

HealthOptions HealthFrom(const models::RemoteConfig& remote) {
  HealthOptions options;
  options.consecutive_failures = remote.consecutive_failures;
  options.base_ejection = std::chrono::milliseconds(remote.base_ejection_ms);
  options.max_ejection = std::chrono::milliseconds(remote.max_ejection_ms);
  options.healthy_threshold = remote.health_check.healthy_threshold;
  options.unhealthy_threshold = remote.health_check.unhealthy_threshold;
  return options;
}

}  // namespace

EndpointSet::EndpointSet(const models::RemoteConfig& remote, std::vector<Endpoint> endpoints,
                         std::vector<EndpointMetrics> metrics, std::string_view zone, uint64_t seed)
    : max_ejection_percent_(remote.max_ejection_percent),
      health_options_(HealthFrom(remote)),
      picker_(seed) {
  std::map<int, std::vector<size_t>> by_priority;
  for (size_t e = 0; e < endpoints.size(); ++e) {
    const models::RemoteEndpoint& spec = remote.endpoints[e];
    slots_.push_back({.endpoint = std::move(endpoints[e]),
                      .zone = spec.zone,
                      .priority = spec.priority,
                      .weight = spec.weight,
                      .model = spec.model,
                      .local = !zone.empty() && spec.zone == zone,
                      .idle = {},
                      .idle_count = 0,
                      .health = EndpointHealth(HealthFrom(remote)),
                      .breaker = CircuitBreaker(remote.breaker),
                      .metrics = e < metrics.size() ? metrics[e] : EndpointMetrics{},
                      .outstanding = std::make_shared<int64_t>(0),
                      .latency_s = 0});
    by_priority[spec.priority].push_back(e);
  }
  for (auto& [priority, members] : by_priority) groups_.push_back(std::move(members));
}

bool EndpointSet::Healthy(size_t e, TimePoint now) const {
  return slots_[e].health.state(now) == EndpointState::kHealthy &&
         slots_[e].breaker.state(now) == BreakerState::kClosed;
}

bool EndpointSet::Available(size_t e, TimePoint now) const {
  return slots_[e].health.Available(now) && slots_[e].breaker.WouldAdmit(now);
}

Candidate EndpointSet::CandidateFor(size_t e) const {
  const EndpointSlot& slot = slots_[e];
  Candidate c;
  c.index = e;
  c.priority = slot.priority;
  c.weight = slot.weight;
  c.outstanding = *slot.outstanding;
  c.latency_s = slot.latency_s;
  return c;
}

EndpointSet::Choice EndpointSet::Consider(const std::vector<size_t>& members,
                                          const std::vector<bool>& tried, TimePoint now) const {
  Choice all, local;
  size_t healthy = 0, local_members = 0, local_healthy = 0;
  for (size_t e : members) {
    const EndpointSlot& slot = slots_[e];
    const bool is_healthy = Healthy(e, now);
    healthy += is_healthy;
    local_members += slot.local;
    local_healthy += slot.local && is_healthy;
    if (tried[e]) continue;
    if (Available(e, now)) {
      all.available.push_back(CandidateFor(e));
      if (slot.local) local.available.push_back(CandidateFor(e));
    }
    if (!slot.health.Throttled(now) && slot.breaker.WouldAdmit(now)) {
      all.eligible.push_back(CandidateFor(e));
    }
  }
  all.serves = healthy * 2 >= members.size();
  // The local zone while it holds up: at least half of it healthy, and one of it available.
  if (all.serves && local_members > 0 && local_healthy * 2 >= local_members &&
      !local.available.empty()) {
    all.available = std::move(local.available);
  }
  return all;
}

std::optional<Ticket> EndpointSet::Start(const std::vector<bool>& tried, TimePoint now) {
  Candidates panic;  // of the first group below half
  std::optional<size_t> chosen;
  for (const std::vector<size_t>& members : groups_) {
    Choice choice = Consider(members, tried, now);
    if (choice.serves && !choice.available.empty()) {
      chosen = picker_.Pick(choice.available);
      break;
    }
    if (!choice.serves && panic.empty()) panic = std::move(choice.eligible);
  }
  if (!chosen) chosen = picker_.Pick(panic);
  if (!chosen) return std::nullopt;
  EndpointSlot& slot = slots_[*chosen];
  Ticket ticket;
  ticket.endpoint = *chosen;
  ticket.health_probe = slot.health.state(now) == EndpointState::kHalfOpen;
  if (ticket.health_probe) slot.health.StartProbe();
  ticket.breaker_probe = slot.breaker.Admit(now) == CircuitBreaker::Admission::kProbe;
  return ticket;
}

EndpointHealth::Outcome EndpointSet::HealthOutcome(const AttemptOutcome& outcome) {
  using Outcome = EndpointHealth::Outcome;
  if (outcome.cut_by_caller) return Outcome::kInconclusive;
  switch (outcome.kind) {
    case AttemptOutcome::kOk:
      return Outcome::kSuccess;
    case AttemptOutcome::kStatus:
      if (outcome.status == 429) return Outcome::kThrottled;
      if (outcome.status == 503 && outcome.retry_after_s > 0) return Outcome::kThrottled;
      // Any other reply below 500 answers HTTP sanely: a 404 is the request's fault.
      return outcome.status >= 500 ? Outcome::kFailure : Outcome::kSuccess;
    case AttemptOutcome::kConnect:
    case AttemptOutcome::kTimeout:
    case AttemptOutcome::kBadReply:
      return Outcome::kFailure;
  }
  return Outcome::kFailure;
}

CircuitBreaker::Verdict EndpointSet::BreakerVerdict(const models::BreakerRule& rule,
                                                    const AttemptOutcome& outcome) {
  using Verdict = CircuitBreaker::Verdict;
  if (outcome.cut_by_caller) return Verdict::kIgnored;
  auto counted = [](bool counts) { return counts ? Verdict::kFailure : Verdict::kIgnored; };
  switch (outcome.kind) {
    case AttemptOutcome::kOk:
      return Verdict::kSuccess;
    case AttemptOutcome::kStatus:
      return rule.CountsStatus(outcome.status) ? Verdict::kFailure : Verdict::kSuccess;
    case AttemptOutcome::kConnect:
      return counted(rule.count_connect);
    case AttemptOutcome::kTimeout:
      return counted(rule.count_timeout);
    case AttemptOutcome::kBadReply:
      return counted(rule.count_bad_reply);
  }
  return Verdict::kIgnored;
}

EndpointChange EndpointSet::Finish(const Ticket& ticket, const AttemptOutcome& outcome,
                                   TimePoint now) {
  EndpointSlot& slot = slots_[ticket.endpoint];
  EndpointChange change;
  change.endpoint = ticket.endpoint;
  const EndpointState before = slot.health.state(now);
  const int64_t ejections_before = slot.health.ejections();
  change.outcome = HealthOutcome(outcome);
  slot.health.Record(change.outcome, now, ticket.health_probe,
                     std::chrono::seconds(outcome.retry_after_s));
  if (slot.health.WantsEjection() && MayEject(now)) slot.health.Eject(now);
  change.ejected = slot.health.ejections() != ejections_before;
  change.back_in_service =
      before != EndpointState::kHealthy && slot.health.state(now) == EndpointState::kHealthy;
  change.breaker =
      slot.breaker.Record(BreakerVerdict(slot.breaker.rule(), outcome), now, ticket.breaker_probe,
                          std::chrono::seconds(outcome.retry_after_s));
  return change;
}

EndpointChange EndpointSet::RecordCheck(size_t e, bool passed) {
  EndpointChange change;
  change.endpoint = e;
  if (slots_[e].health.RecordCheck(passed)) {
    change.back_in_service = passed;
    change.failed_checks = !passed;
  }
  return change;
}

std::vector<std::pair<size_t, BreakerState>> EndpointSet::CarryOver(EndpointSet& old,
                                                                    TimePoint now) {
  std::vector<std::pair<size_t, BreakerState>> reset;
  for (size_t e = 0; e < slots_.size(); ++e) {
    EndpointSlot& slot = slots_[e];
    for (EndpointSlot& before : old.slots_) {
      if (before.endpoint.place != slot.endpoint.place) continue;
      slot.health = before.health;
      slot.health.SetOptions(health_options_);
      if (before.breaker.rule() == slot.breaker.rule()) {
        slot.breaker = before.breaker;
      } else if (const BreakerState was = before.breaker.state(now); was != BreakerState::kClosed) {
        reset.emplace_back(e, was);
      }
      slot.latency_s = before.latency_s;
      // What the endpoint showed of its replies outlives a reload: it is the same server.
      slot.echoes_id = before.echoes_id;
      slot.no_reuse_until = before.no_reuse_until;
      slot.out_of_step = before.out_of_step;
      slot.idle = std::move(before.idle);
      slot.idle_count = std::exchange(before.idle_count, 0);
      before.idle.clear();
    }
  }
  return reset;
}

std::optional<CircuitBreaker::Transition> EndpointSet::TripFromPeer(size_t e, TimePoint until,
                                                                    TimePoint now) {
  return slots_[e].breaker.Trip(until, now);
}

std::chrono::seconds EndpointSet::WaitForAnEndpoint(const std::vector<bool>& tried,
                                                    TimePoint now) const {
  TimePoint soonest = TimePoint::max();
  for (size_t e = 0; e < slots_.size(); ++e) {
    if (tried[e]) continue;
    TimePoint at = slots_[e].health.AvailableAt(now);
    if (slots_[e].breaker.state(now) == BreakerState::kOpen) {
      at = std::max(at, slots_[e].breaker.open_until());
    }
    soonest = std::min(soonest, at);
  }
  if (soonest == TimePoint::max()) return std::chrono::seconds(1);
  return std::max(std::chrono::seconds(1), std::chrono::ceil<std::chrono::seconds>(soonest - now));
}

// Whether another endpoint may be ejected: max_ejection_percent of the set are out at most,
// and at least one may be (0 turns ejection off).
bool EndpointSet::MayEject(TimePoint now) const {
  size_t out = 0;
  for (const EndpointSlot& slot : slots_) {
    const EndpointState state = slot.health.state(now);
    out += state == EndpointState::kEjected || state == EndpointState::kHalfOpen;
  }
  const size_t allowed =
      max_ejection_percent_ == 0
          ? 0
          : std::max<size_t>(1, slots_.size() * size_t(max_ejection_percent_) / 100);
  return out < allowed;
}

}  // namespace pillar::upstream
