// RemoteRunner's insides, shared by the files that implement it (not a door into upstream/:
// include remote_runner.h).
//
// Threads: what the runner knows (endpoints, breakers, queue, budget) is under one mutex, `mu`,
// and each call's I/O (its connections and timers) runs on one event loop, its lane: the loop of
// the server thread that called Infer(), so that a proxied request crosses no thread; or the
// runner's own io_context, for callers that run no loop (jobs) and for the runner's own work
// (active checks, reconfigurations, trips from other instances, stopping). Every handler takes
// `mu` first. A connection or timer is only ever touched on its own lane: closing or cancelling
// one from elsewhere is posted to its lane.
//
//   remote_runner.cc    creation, admission and the queue, completion, the live view, stop
//   remote_attempts.cc  one request's attempts: choosing, connecting, sending, retries with
//                       their budget and back-off, hedges
//   remote_replies.cc   what an attempt's reply means: an answer, or a failed attempt
//   remote_breakers.cc  breakers and health as they change: logs, metrics, the audit log,
//                       trips shared with other instances, active checks' results
//   remote_pool.cc      the lanes, each endpoint's idle connections, endpoints out of step
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/crypto.h"
#include "protocol/json_codec.h"
#include "protocol/openai_response.h"
#include "protocol/sse_reader.h"
#include "runtime/return_promises.h"
#include "upstream/circuit_breaker.h"
#include "upstream/endpoint_set.h"
#include "upstream/health_checker.h"
#include "upstream/remote_runner.h"
#include "upstream/upstream_connection.h"
#include "upstream/upstream_credentials.h"

namespace pillar::upstream {

namespace asio = boost::asio;

struct Call;

// A streamed answer's body on its way from an upstream to the client (remote_stream.cc): read
// as server-sent events, each checked (JSON, no error inside), the usage kept, and handed to the
// call's EventSink one at a time; the connection reads on once the client took the last one.
// The first event handed on commits the call to this attempt: after it, a failure ends the
// stream instead of trying another endpoint. Runs on the call's lane, where every end of a
// started call runs too (AbandonOnItsLane): once the call is completed, and its caller told, no
// event is handed on (the exchange that would take it may be gone).
class StreamRelay final : public BodySink, public std::enable_shared_from_this<StreamRelay> {
 public:
  // `done_taken` runs on the lane, once, when the client took [DONE] (ends its answer there).
  // Made when the attempt is sent.
  StreamRelay(std::shared_ptr<Call> call, asio::io_context& lane,
              absl::AnyInvocable<void() &&> done_taken);
  void OnBody(std::string piece, absl::AnyInvocable<void(bool) &&> more) override;

  // Why the stream cannot be used (empty: it can), whether it ended with [DONE], whether the
  // client went away, and the usage it reported (zero when none).
  const std::string& error() const { return error_; }
  bool done() const { return done_; }
  // Whether the client took [DONE]: its answer is whole, whatever comes of the body's end.
  bool delivered_done() const { return delivered_done_; }
  bool cancelled() const { return cancelled_; }
  Clock::time_point sent_at() const { return sent_at_; }
  // How long the stream was held back by its client, to `now`: the time the connection's writes
  // waited for the client's socket to take them (runtime::EventSink::ClientWaitNanos), or,
  // where the sink cannot tell (no connection), of each event's wait for the client what went
  // past kOwnShareOfAWait. Not the whole of the events' waits: pillar's own hand-offs, screening
  // and writes are in them (review helper-104: counted whole, an upstream that streamed without
  // end as fast as pillar passed it on was put down as the client's about half the time).
  Clock::duration client_time(Clock::time_point now) const;
  // How long the stream took on the upstream's side, from its sending to [DONE] (or `now` when
  // it has not come), less what its events waited for the client: the upstream is read only as
  // fast as the client takes them, so a slow reader's pace is not the endpoint's latency.
  Clock::duration UpstreamTime(Clock::time_point now) const;
  protocol::TokenUsage usage() const { return usage_; }
  bool usage_reported() const { return usage_reported_; }  // a usage chunk came
  // The call's answer once the stream is whole: the usage its upstream reported.
  runtime::InferResult Answer() const;

 private:
  // Of an event's wait for the client, what was pillar's own: the hand-off to the client's
  // loop and the write into a socket with room take well under this, even on busy cores. Past
  // it, the client's socket was full: the client had not read (the kernel wakes a writer only
  // once a third of its buffer is free, so a slow reader's waits come long, not many and short).
  static constexpr Clock::duration kOwnShareOfAWait = std::chrono::milliseconds(1);
  static Clock::duration ClientsShare(Clock::duration wait) {
    return std::max(wait - kOwnShareOfAWait, Clock::duration::zero());
  }

  void Take(const protocol::SseEvent& event);
  void Forward(absl::AnyInvocable<void(bool) &&> more);

  std::shared_ptr<Call> call_;
  asio::io_context& lane_;
  absl::AnyInvocable<void() &&> done_taken_;
  protocol::SseReader reader_{1 << 20};
  std::deque<std::pair<runtime::EventKind, std::string>> queue_;
  protocol::TokenUsage usage_;
  bool usage_reported_ = false;
  std::string error_;
  bool done_ = false;
  bool delivered_done_ = false;
  bool cancelled_ = false;
  bool awaiting_client_ = false;  // an event is with the client: the upstream is not read
  Clock::time_point sent_at_;
  int64_t socket_wait_at_sent_ns_;  // the connection's, when sent (-1: not measured)
  Clock::time_point handed_at_;     // when the event with the client went to it
  Clock::duration client_time_{};   // what the events taken so far waited for the client
  Clock::duration handed_time_{};   // the whole of their waits, pillar's share included
  Clock::time_point done_at_;       // when [DONE] was read
  Clock::duration handed_time_at_done_{};
};

// One attempt of a request at one endpoint. A request has more than one in flight only while a
// hedge races the first.
struct Attempt {
  Ticket ticket;
  std::shared_ptr<EndpointSet> set;  // the endpoints it was chosen among (a change keeps them)
  std::shared_ptr<UpstreamConnection> connection;  // once connected
  std::shared_ptr<UpstreamConnection> connecting;  // while it connects (closed to cut it off)
  bool hedge = false;
  bool cancelled = false;
  int64_t budget_ms = 0;  // the time it told the upstream it has (X-Pillar-Timeout-Ms)
  // A language model's call to an endpoint with its own name for the model: the body with that
  // name (empty: the call's body).
  std::string body;
  std::shared_ptr<StreamRelay> relay;  // a streamed call's
  // Set once the client took [DONE], until the body's end: closes the connection if the end
  // does not come within kBodyEndAfterDone.
  std::shared_ptr<asio::steady_timer> linger_timer;
};

// How long a stream's body may take to end after the client took its [DONE] (an upstream ends
// it with the same write, or the next): past it the connection is closed, a failed attempt.
inline constexpr std::chrono::milliseconds kBodyEndAfterDone{1000};

// One request, from admission to its answer.
struct Call {
  protocol::InferenceRequest request;
  runtime::InferCallback done;
  int64_t rows = 0;
  std::string body;  // encoded once; every attempt's request views it
  // A language model's call (platform = "openai", Generate()): its route, and the client's body
  // for the endpoints that name the model their own way.
  std::optional<runtime::OpenAiRoute> openai_route;
  std::string client_body;
  std::optional<int64_t> set_max_tokens;  // the model's default_max_tokens, for the upstream
  // A streamed call: where its events go, and whether one went (no other attempt may then
  // take over: the client has part of this one's answer).
  std::shared_ptr<runtime::EventSink> events;
  std::atomic<bool> committed{false};
  Clock::time_point arrived;
  Clock::time_point started;  // when it took its place among the calls in flight
  Clock::time_point deadline;
  std::vector<bool> tried;  // by endpoint of tried_in
  std::shared_ptr<const EndpointSet> tried_in;
  std::vector<std::shared_ptr<Attempt>> live;  // attempts in flight
  std::string last_error;
  bool all_throttled = true;
  bool all_shed_for_deadline = true;  // every reply so far was a shed for this caller's deadline
  // The deadline is the caller's (X-Pillar-Timeout-Ms), sooner than timeout_ms: an attempt cut
  // off by it says nothing of the endpoint.
  bool caller_deadline = false;
  // The deadline came while a streamed answer waited for its client to take an event: the
  // client's slowness, which says nothing of the endpoint or the backend.
  bool held_by_client = false;
  bool backend_probe = false;  // let through by the backend breaker while half-open
  std::string upstream_id;     // the id the upstream sees, and its reply must carry
  int attempts = 0;            // started so far, hedges included
  int hedges = 0;
  bool sent = false;       // an attempt's request went out: an upstream may have seen it
  bool retrying = false;   // holds one of the retry budget's places
  bool completed = false;  // answered: whatever comes back later is dropped
  // Answered when its client took [DONE], while its attempt still reads the body's end: the
  // call keeps its place among those in flight until then (EndLinger).
  bool lingering = false;
  bool abandoned = false;  // its client went away (Abandon)
  bool queued = false;     // waited for a place among the calls in flight
  bool promised = false;   // took a place kept for a caller told to come back
  // The last attempt failed to connect (refused, not timed out): nothing reached an upstream.
  bool last_was_refused_connection = false;
  std::optional<int64_t> retry_after;
  std::shared_ptr<asio::steady_timer> hedge_timer;
  size_t lane = 0;  // the event loop its I/O runs on (State::lanes)

  bool CutByCaller() const { return caller_deadline && Clock::now() >= deadline; }
};

void Count(monitor::Counter* counter);
int64_t MillisUntil(Clock::time_point at, Clock::time_point now);

struct RemoteRunner::State : std::enable_shared_from_this<State> {
  // --- Set by Create(), read-only afterwards.
  models::ModelConfig config;  // its [remote] changes with Reconfigure(), on the runner's thread
  models::RemoteConfig signed_remote;  // as the version's signature has it
  std::string model_name;
  std::string version;
  std::string resource;  // model:<name>/<version>, for the audit log
  std::string target;    // /v2/models/<upstream model>[/versions/<v>]/infer, after the base path
  std::string upstream_model;  // [remote] model, or the model's own name
  std::string query;           // platform = "openai": "?api-version=..." when configured
  std::optional<SecretString> token;
  std::optional<TokenRedactor> redactor;         // views `token`
  std::optional<UpstreamCredential> credential;  // the token as the upstream takes it
  std::shared_ptr<asio::ssl::context> tls;
  audit::AuditSink* audit = nullptr;
  BreakerSync* breaker_sync = nullptr;
  bool active_checks = true;
  std::vector<uint64_t> subscriptions;  // with breaker_sync
  RetryMetrics metrics;
  UpstreamMetrics metric_families;  // for the endpoints a reconfiguration adds
  uint64_t gauge_claim = 0;         // metric_families.owners: this runner's claim
  // Request ids for upstreams: unique per runner (a random prefix) and per request.
  const std::string id_prefix = HexEncode(RandomBytes(6));
  std::atomic<uint64_t> next_id{0};

  asio::io_context io;  // the runner's own lane (0)
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);

  // --- Under mu.
  absl::Mutex mu;
  // The event loops calls run on, by lane: the runner's own first, then each server loop as it
  // first calls (as many as the server has threads).
  std::vector<asio::io_context*> lanes ABSL_GUARDED_BY(mu) = {&io};
  std::shared_ptr<EndpointSet> endpoints ABSL_GUARDED_BY(mu);  // replaced whole by Reconfigure()
  // Each endpoint's count of attempts in flight, by place, while a set that has it lives (an
  // attempt keeps its set alive): an endpoint kept, or removed and listed again while attempts
  // sent to it before still run, counts them (ShareOutstanding).
  std::map<std::string, std::weak_ptr<int64_t>> outstanding_by_place ABSL_GUARDED_BY(mu);
  std::string zone;
  std::optional<CircuitBreaker> backend_breaker ABSL_GUARDED_BY(mu);
  std::shared_ptr<HealthChecker> checker ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  int64_t in_flight ABSL_GUARDED_BY(mu) = 0;
  std::deque<std::shared_ptr<Call>> queue ABSL_GUARDED_BY(mu);
  // Connections with a call on them, and their lanes.
  std::map<std::shared_ptr<UpstreamConnection>, size_t> busy ABSL_GUARDED_BY(mu);
  int64_t retrying ABSL_GUARDED_BY(mu) = 0;  // calls holding a place in the retry budget
  // A moving average of a successful call's time (0: none yet).
  double mean_call_ns ABSL_GUARDED_BY(mu) = 0;
  // Places kept for the callers told to come back.
  runtime::ReturnPromises promises ABSL_GUARDED_BY(mu);
  // Back-offs and hedges, cut at stop.
  std::set<std::shared_ptr<asio::steady_timer>> timers ABSL_GUARDED_BY(mu);
  std::mt19937_64 jitter ABSL_GUARDED_BY(mu){std::random_device{}()};
  // The latest attempt latencies (a ring), for the hedge's quantile.
  std::vector<double> latencies ABSL_GUARDED_BY(mu);
  size_t next_latency ABSL_GUARDED_BY(mu) = 0;

  int64_t capacity() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return int64_t(endpoints->size()) * config.remote.connections;
  }

  // remote_runner.cc
  void Admit(std::shared_ptr<Call> call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<absl::Status> QueueRefusal(const Call& call, int64_t ahead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<absl::Status> DeadlineRefusal(const Call& call, int64_t calls_ahead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The Retry-After for shedding `call` (estimated at `estimate_s`): a booked place when one is
  // left (runtime/return_promises.h).
  int64_t RetryAfter(const Call& call, int64_t estimate_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // How long a call with `calls_ahead` queued before it takes to be answered, estimated.
  int64_t EstimatedNanos(int64_t calls_ahead) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Complete(Call& call, absl::StatusOr<runtime::InferResult> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Starts queued calls while the calls in flight leave room (from the io_context, not here: a
  // queue of calls that each end at once would otherwise recurse once per call).
  void StartQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Finish(Call& call, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The client went away (its Cancellation, on the client's loop): Abandon() runs on the call's
  // lane, where its connections live; the call may have moved to another loop's connection.
  void AbandonOnItsLane(std::shared_ptr<Call> call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Abandon(const std::shared_ptr<Call>& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  runtime::UpstreamStatus Describe() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Stop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // remote_pool.cc
  // The lane of the server loop `loop`, added on its first call.
  size_t LaneOf(asio::io_context* loop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // An idle connection of `lane` to the endpoint, checked (Idle()); null when none is left.
  std::shared_ptr<UpstreamConnection> TakeIdle(EndpointSlot& slot, size_t lane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Keeps a connection whose call ended for the next call on `lane`. The endpoint keeps at most
  // `connections` idle in all: past that the oldest idle one of another lane makes room (the
  // traffic moved), or this one closes.
  void ReturnIdle(EndpointSlot& slot, size_t lane, std::shared_ptr<UpstreamConnection> connection)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Closes the idle connections of `slot`, each on its own lane.
  void CloseIdle(EndpointSlot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The endpoint sent bytes nobody asked for (a second reply, a reply with another request's
  // id): any kept-alive connection to it may hold the next stray reply, which would be read as
  // the answer to whatever request goes out on it next. For a while its connections carry one
  // call each, and its idle ones close now: kNoReuseFor the first time, twice as long each time
  // it does so again (a server that stays out of step soon loses reuse for good), at most
  // kMaxNoReuse.
  void OutOfStep(EndpointSlot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  static constexpr std::chrono::seconds kNoReuseFor{60};
  static constexpr std::chrono::hours kMaxNoReuse{24};

  // remote_attempts.cc (and the replies' handlers, remote_replies.cc)
  void TryNext(std::shared_ptr<Call> call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void StartAttempt(std::shared_ptr<Call> call, bool hedge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void ArmHedge(const std::shared_ptr<Call>& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Open(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Send(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // `decoded`: a 200's body, decoded before the lock was taken; `usage`: a language model's 200,
  // checked before the lock was taken.
  void OnReply(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
               absl::StatusOr<UpstreamReply> reply, CallFailure failure,
               std::optional<absl::StatusOr<protocol::InferenceResponse>> decoded,
               std::optional<absl::StatusOr<protocol::ReplyUsage>> usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnNoReply(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
                 const absl::Status& status, CallFailure failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnOk(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
            absl::StatusOr<protocol::InferenceResponse> decoded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A language model's 200: `usage` read from its body before the lock was taken.
  void OnGenerated(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, std::string body,
                   absl::StatusOr<protocol::ReplyUsage> usage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A 200 that answers the call (the attempt won), and one that is no answer (a failed attempt).
  void Answered(std::shared_ptr<Call> call, const std::shared_ptr<Attempt>& attempt,
                runtime::InferResult result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Unusable(std::shared_ptr<Call> call, const std::shared_ptr<Attempt>& attempt,
                std::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The relay of a streamed call's attempt.
  std::shared_ptr<StreamRelay> RelayFor(const std::shared_ptr<Call>& call,
                                        const std::shared_ptr<Attempt>& attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A streamed call whose client took [DONE]: answered now; its attempt reads the body's end on,
  // for the endpoint's health only.
  void OnDoneTaken(std::shared_ptr<Call> call, const std::shared_ptr<Attempt>& attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Folds how long `call` held its place into mean_call_ns, the wait estimate's measure.
  void NoteHeld(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The end of an attempt: a lingering call (OnDoneTaken) gives its place back.
  void EndLinger(Call& call, Attempt& attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A streamed call's 200 ended: its events were all handed on, or it failed.
  void OnStreamEnd(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // An attempt's call on its connection came back: the endpoint's bookkeeping (outstanding,
  // and its latency when `answered`: a 200 that is an answer, a stream whole to [DONE]),
  // before what the reply means (OnReply).
  void Returned(const Attempt& attempt, Clock::time_point sent, bool answered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Where what `attempt` learns of its endpoint goes: the endpoint of its place in the set now in
  // force, which a reload (a backends file rewritten, even unchanged) may have put in place of
  // the one the attempt was chosen from while it ran; none when the endpoint left. Its probe
  // places go along: the set in force took over the endpoint's health and breaker (CarryOver).
  std::optional<Ticket> InForce(const Attempt& attempt) const ABSL_SHARED_LOCKS_REQUIRED(mu);
  // The request line's target and the body of `attempt` of `call`.
  std::string TargetFor(const Call& call, Attempt& attempt, const EndpointSlot& slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Sends the attempt on an idle connection of its call's loop, or opens one.
  void Dispatch(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // An attempt that failed: the call's next step once no other attempt of it is in flight.
  void AttemptFailed(std::shared_ptr<Call> call, const std::shared_ptr<Attempt>& attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void CancelOthers(Call& call, const Attempt* winner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool TakeRetryPlace(Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  [[nodiscard]] absl::StatusOr<std::chrono::milliseconds> RetryWait(Call& call,
                                                                    Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool AnyLeft(Call& call, Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void SyncTried(Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void NoteLatency(double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<std::chrono::milliseconds> HedgeDelay() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Failed(Call& call, const Attempt& attempt, std::string_view why, bool throttled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  [[nodiscard]] absl::Status TimedOut(const Call& call) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  [[nodiscard]] absl::Status Exhausted(const Call& call) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::string Redact(std::string_view text) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // remote_breakers.cc
  void Record(const Attempt& attempt, AttemptOutcome outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void RecordBackend(const Call& call, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void BackendChanged(CircuitBreaker::Transition change, Clock::time_point now, bool from_peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Announce(EndpointSet& set, const EndpointChange& change, Clock::time_point now,
                bool from_peer = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // `closed_by`: why a breaker closed, when not by its half-open probes (a new rule).
  void Report(const CircuitBreaker& breaker, CircuitBreaker::Transition change,
              std::string_view endpoint, Clock::time_point now, bool from_peer,
              std::string_view closed_by = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::string BreakerName(std::string_view endpoint) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void PublishTrip(const std::string& name, Clock::time_point until, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnPeerTrip(std::string_view endpoint, int64_t until_unix_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnCheck(size_t e, bool passed, std::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // remote_runner.cc
  // Sets the health and breaker gauges of the endpoints in service, and the backend's breaker
  // gauge, from their state now: after a reconfiguration (a new set, an endpoint re-added or
  // respelled, a breaker rule changed) and each second, since ejections and trips also end by
  // time alone (review helper-113: gauges left open or ejected while the admin API said closed).
  // False, setting nothing, once a newer runner serves the version (GaugeOwners).
  bool RefreshGauges(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // RefreshGauges each second on the runner's own lane, until Stop or a newer runner.
  void ScheduleGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Gives each endpoint of `set` the count of attempts in flight its place already has in a
  // live set (outstanding_by_place), else makes its own the place's.
  void ShareOutstanding(EndpointSet& set) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Starts active checks of the endpoints in service (stopping those of the ones before).
  void StartChecks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Subscribes the version's breaker and its endpoints' to trips of other instances.
  void SubscribeTrips() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void UnsubscribeTrips() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void ApplyReconfigure(models::RemoteConfig remote, std::vector<Endpoint> parsed,
                        std::shared_ptr<asio::ssl::context> new_tls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

}  // namespace pillar::upstream
