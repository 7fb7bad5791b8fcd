// RemoteRunner's insides, shared by the files that implement it (not a door into upstream/:
// include remote_runner.h). Everything here lives on the runner's own thread and io_context,
// except what Infer() and Upstreams() post to it.
//
//   remote_runner.cc    creation, admission and the queue, completion, the live view, stop
//   remote_attempts.cc  one request's attempts: choosing, connecting, sending, reading the
//                       reply, retries with their budget and back-off, hedges
//   remote_breakers.cc  breakers and health as they change: logs, metrics, the audit log,
//                       trips shared with other instances, active checks' results
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "protocol/json_codec.h"
#include "runtime/return_promises.h"
#include "upstream/circuit_breaker.h"
#include "upstream/endpoint_set.h"
#include "upstream/health_checker.h"
#include "upstream/remote_runner.h"
#include "upstream/upstream_connection.h"

namespace pillar::upstream {

namespace asio = boost::asio;

// One attempt of a request at one endpoint. A request has more than one in flight only while a
// hedge races the first.
struct Attempt {
  Ticket ticket;
  std::shared_ptr<EndpointSet> set;  // the endpoints it was chosen among (a change keeps them)
  std::shared_ptr<UpstreamConnection> connection;  // once connected
  bool hedge = false;
  bool cancelled = false;
  int64_t budget_ms = 0;  // the time it told the upstream it has (X-Pillar-Timeout-Ms)  // another
                          // attempt answered: this one's outcome says nothing
};

// One request, from admission to its answer.
struct Call {
  protocol::InferenceRequest request;
  runtime::InferCallback done;
  int64_t rows = 0;
  std::string body;  // encoded once; every attempt's request views it
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
  bool backend_probe = false;  // let through by the backend breaker while half-open
  std::string upstream_id;     // the id the upstream sees, and its reply must carry
  int attempts = 0;            // started so far, hedges included
  int hedges = 0;
  bool sent = false;       // an attempt's request went out: an upstream may have seen it
  bool retrying = false;   // holds one of the retry budget's places
  bool completed = false;  // answered: whatever comes back later is dropped
  bool queued = false;     // waited for a place among the calls in flight
  bool promised = false;   // took a place kept for a caller told to come back
  // The last attempt failed to connect (refused, not timed out): nothing reached an upstream.
  bool last_was_refused_connection = false;
  std::optional<int64_t> retry_after;
  std::shared_ptr<asio::steady_timer> hedge_timer;

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
  std::optional<SecretString> token;
  std::optional<SecretString> authorization;  // "Bearer <token>", the field's value
  std::shared_ptr<asio::ssl::context> tls;
  audit::AuditSink* audit = nullptr;
  BreakerSync* breaker_sync = nullptr;
  bool active_checks = true;
  std::vector<uint64_t> subscriptions;  // with breaker_sync
  RetryMetrics metrics;
  UpstreamMetrics metric_families;  // for the endpoints a reconfiguration adds
  // Request ids for upstreams: unique per runner (a random prefix) and per request.
  const std::string id_prefix = HexEncode(RandomBytes(6));
  std::atomic<uint64_t> next_id{0};

  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);

  // --- On the runner's thread only.
  std::shared_ptr<EndpointSet> endpoints;  // in service; replaced whole by Reconfigure()
  std::string zone;
  std::optional<CircuitBreaker> backend_breaker;
  std::shared_ptr<HealthChecker> checker;
  protocol::InferenceResponseDecoder decoder;
  bool stopping = false;
  int64_t in_flight = 0;
  std::deque<std::shared_ptr<Call>> queue;
  std::set<std::shared_ptr<UpstreamConnection>> busy;
  int64_t retrying = 0;              // calls holding a place in the retry budget
  double mean_call_ns = 0;           // moving average of a successful call's time (0: none yet)
  runtime::ReturnPromises promises;  // places kept for the callers told to come back
  std::set<std::shared_ptr<asio::steady_timer>> timers;  // back-offs and hedges, cut at stop
  std::mt19937_64 jitter{std::random_device{}()};
  // The latest attempt latencies (a ring), for the hedge's quantile.
  std::vector<double> latencies;
  size_t next_latency = 0;

  int64_t capacity() const { return int64_t(endpoints->size()) * config.remote.connections; }

  // remote_runner.cc
  void Admit(std::shared_ptr<Call> call);
  std::optional<absl::Status> QueueRefusal(const Call& call, int64_t ahead);
  std::optional<absl::Status> DeadlineRefusal(const Call& call, int64_t calls_ahead);
  // The Retry-After for shedding `call` (estimated at `estimate_s`): a booked place when one is
  // left (runtime/return_promises.h).
  int64_t RetryAfter(const Call& call, int64_t estimate_s);
  // How long a call with `calls_ahead` queued before it takes to be answered, estimated.
  int64_t EstimatedNanos(int64_t calls_ahead) const;
  void Complete(Call& call, absl::StatusOr<runtime::InferResult> result);
  // Starts queued calls while the calls in flight leave room (from the io_context, not here: a
  // queue of calls that each end at once would otherwise recurse once per call).
  void StartQueued();
  void Finish(Call& call, absl::Status status);
  runtime::UpstreamStatus Describe() const;
  void Stop();

  // remote_attempts.cc
  void TryNext(std::shared_ptr<Call> call);
  void StartAttempt(std::shared_ptr<Call> call, bool hedge);
  void ArmHedge(const std::shared_ptr<Call>& call);
  void Open(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt);
  void Send(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused);
  void OnReply(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
               absl::StatusOr<UpstreamReply> reply, CallFailure failure);
  void OnOk(std::shared_ptr<Call> call, std::shared_ptr<Attempt> attempt, bool reused,
            const UpstreamReply& reply);
  // An attempt that failed: the call's next step once no other attempt of it is in flight.
  void AttemptFailed(std::shared_ptr<Call> call, const std::shared_ptr<Attempt>& attempt);
  void CancelOthers(Call& call, const Attempt* winner);
  bool TakeRetryPlace(Call& call);
  [[nodiscard]] absl::StatusOr<std::chrono::milliseconds> RetryWait(Call& call,
                                                                    Clock::time_point now);
  bool AnyLeft(Call& call, Clock::time_point now);
  void SyncTried(Call& call);
  void NoteLatency(double seconds);
  std::optional<std::chrono::milliseconds> HedgeDelay();
  void Failed(Call& call, const Attempt& attempt, std::string_view why, bool throttled);
  [[nodiscard]] absl::Status TimedOut(const Call& call) const;
  [[nodiscard]] absl::Status Exhausted(const Call& call) const;
  std::string Redact(std::string_view text) const;

  // remote_breakers.cc
  void Record(const Attempt& attempt, AttemptOutcome outcome);
  void RecordBackend(const Call& call, const absl::Status& status);
  void BackendChanged(CircuitBreaker::Transition change, Clock::time_point now, bool from_peer);
  void Announce(EndpointSet& set, const EndpointChange& change, Clock::time_point now,
                bool from_peer = false);
  void Report(const CircuitBreaker& breaker, CircuitBreaker::Transition change,
              std::string_view endpoint, Clock::time_point now, bool from_peer);
  std::string BreakerName(std::string_view endpoint) const;
  void PublishTrip(const std::string& name, Clock::time_point until, Clock::time_point now);
  void OnPeerTrip(std::string_view endpoint, int64_t until_unix_ms);
  void OnCheck(size_t e, bool passed, std::string_view why);

  // remote_runner.cc
  // Starts active checks of the endpoints in service (stopping those of the ones before).
  void StartChecks();
  // Subscribes the version's breaker and its endpoints' to trips of other instances.
  void SubscribeTrips();
  void UnsubscribeTrips();
  void ApplyReconfigure(models::RemoteConfig remote, std::vector<Endpoint> parsed,
                        std::shared_ptr<asio::ssl::context> new_tls);
};

}  // namespace pillar::upstream
