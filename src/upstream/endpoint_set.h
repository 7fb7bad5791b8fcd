// The endpoints of one remote model version and what is known of each: health (passive ejection,
// Retry-After, active checks), circuit breaker, load and latency. It decides where each attempt
// goes and what each attempt's outcome says of its endpoint; the runner reports facts
// (AttemptOutcome) and never interprets them itself. Used on its runner's thread only; time is
// passed in.
//
//   EndpointSet set(config.remote, zone, seed);
//   std::optional<Ticket> ticket = set.Start(tried, now);   // none: nothing left to try
//   ... send to set.slot(ticket->endpoint) ...;
//   set.Finish(*ticket, {.kind = AttemptOutcome::kStatus, .status = 503}, now);
//
// Choosing an endpoint, in order:
// - priority groups, best first: a group with at least half of its endpoints healthy serves from
//   those available; a group below half passes its traffic to the groups after it;
// - within the group, endpoints in this gateway's zone while at least half of them are healthy
//   and one is available (the rest of the group otherwise);
// - the picker's power of two choices on (outstanding + 1) x latency;
// - when no group can serve, the first group below half is in panic, as Envoy's is: ejection and
//   failed checks are ignored for it (a set mostly out is more likely wrong about itself than all
//   broken), but open circuit breakers are not (a breaker is a rule the operator asked for).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/remote_config.h"
#include "upstream/circuit_breaker.h"
#include "upstream/endpoint.h"
#include "upstream/endpoint_health.h"
#include "upstream/endpoint_picker.h"
#include "upstream/upstream_metrics.h"

namespace pillar::upstream {

class UpstreamConnection;

// What happened to one attempt, as facts.
struct AttemptOutcome {
  enum Kind {
    kOk,        // a usable 200
    kStatus,    // a reply with another status
    kConnect,   // no connection, or it broke before the reply was whole
    kTimeout,   // the attempt's time ran out
    kBadReply,  // a 200 that does not decode or does not match the model
  };
  Kind kind = kOk;
  int status = 0;              // for kStatus
  int64_t retry_after_s = 0;   // the reply's Retry-After, 0 when none
  bool cut_by_caller = false;  // the caller's own (sooner) deadline ended it: says nothing
};

// One attempt in flight: its endpoint, and whether it holds a probe place.
struct Ticket {
  size_t endpoint = 0;
  bool health_probe = false;
  bool breaker_probe = false;
};

// One endpoint: its address, idle kept-alive connections, health, breaker and load.
struct EndpointSlot {
  Endpoint endpoint;
  std::string zone;
  int priority = 1;
  int weight = 1;
  std::string model;   // its own name for the model (platform = "openai"); empty: [remote] model
  bool local = false;  // in this gateway's zone
  // Idle kept-alive connections by lane (the event loop they run on; RemoteRunner's), oldest
  // first; `idle_count` in all.
  std::vector<std::vector<std::shared_ptr<UpstreamConnection>>> idle;
  int64_t idle_count = 0;
  EndpointHealth health;
  CircuitBreaker breaker;
  EndpointMetrics metrics;
  // Attempts in flight to it. Shared by the slots of its place (Endpoint::place) in every set
  // alive (RemoteRunner::State::ShareOutstanding): an attempt started before a reload of the
  // backends file is still counted by the set in force, and gives its place back to the count it
  // took it from, so the picker and the pool's size (`connections`) see it until it ends.
  std::shared_ptr<int64_t> outstanding = std::make_shared<int64_t>(0);
  double latency_s = 0;  // moving average of its replies' latency (0: none yet)
  // Its replies have echoed the request's id: from then on a reply without one on a reused
  // connection is not taken (an unasked reply an upstream sent out of step looks just like that).
  bool echoes_id = false;
  // Until then its connections carry one call each (RemoteRunner::State::OutOfStep); the
  // episodes so far, each twice as long as the one before.
  std::chrono::steady_clock::time_point no_reuse_until{};
  int out_of_step = 0;
};

// A change of an endpoint's breaker or health, for the logs, the audit log and other instances.
struct EndpointChange {
  size_t endpoint = 0;
  EndpointHealth::Outcome outcome = EndpointHealth::Outcome::kInconclusive;  // for its metrics
  std::optional<CircuitBreaker::Transition> breaker;
  bool ejected = false;
  bool failed_checks = false;  // out of service by its active checks
  bool back_in_service = false;
};

class EndpointSet {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `zone`: this gateway's ([server] zone; empty: no preference).
  EndpointSet(const models::RemoteConfig& remote, std::vector<Endpoint> endpoints,
              std::vector<EndpointMetrics> metrics, std::string_view zone, uint64_t seed);

  size_t size() const { return slots_.size(); }
  EndpointSlot& slot(size_t e) { return slots_[e]; }
  const EndpointSlot& slot(size_t e) const { return slots_[e]; }

  // The endpoint for the next attempt among those not `tried`, taking its probe places; none
  // when nothing is left.
  std::optional<Ticket> Start(const std::vector<bool>& tried, TimePoint now);
  // Records what the attempt said of its endpoint; returns what changed.
  EndpointChange Finish(const Ticket& ticket, const AttemptOutcome& outcome, TimePoint now);
  // An active health check's result.
  EndpointChange RecordCheck(size_t e, bool passed);
  // Takes over what `old` knew of the endpoints it shares with this set (by Endpoint::place, the
  // URL in one spelling): health (under this set's thresholds), the breaker when its rule is
  // unchanged, latency, idle connections. Returns the endpoints whose breaker a new rule started
  // closed while it was open or half-open, each with the state it left: a transition like any
  // other, to be reported.
  std::vector<std::pair<size_t, BreakerState>> CarryOver(EndpointSet& old, TimePoint now);
  // A trip of an endpoint's breaker seen by another instance.
  std::optional<CircuitBreaker::Transition> TripFromPeer(size_t e, TimePoint until, TimePoint now);
  // The wait until some endpoint not `tried` may be sent a request.
  std::chrono::seconds WaitForAnEndpoint(const std::vector<bool>& tried, TimePoint now) const;
  // Whether the endpoint may be chosen now (healthy or probing, breaker admitting, not paused).
  bool Available(size_t e, TimePoint now) const;

 private:
  struct Choice {
    Candidates available;  // may be sent a request now
    Candidates eligible;   // may be sent one in panic
    bool serves = false;   // at least half healthy
  };
  Choice Consider(const std::vector<size_t>& members, const std::vector<bool>& tried,
                  TimePoint now) const;
  Candidate CandidateFor(size_t e) const;
  bool Healthy(size_t e, TimePoint now) const;
  bool MayEject(TimePoint now) const;
  static EndpointHealth::Outcome HealthOutcome(const AttemptOutcome& outcome);
  static CircuitBreaker::Verdict BreakerVerdict(const models::BreakerRule& rule,
                                                const AttemptOutcome& outcome);

  int max_ejection_percent_ = 10;
  HealthOptions health_options_;
  std::vector<EndpointSlot> slots_;
  std::vector<std::vector<size_t>> groups_;  // endpoint indices by priority group, best first
  EndpointPicker picker_;
};

}  // namespace pillar::upstream
