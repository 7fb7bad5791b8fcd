// A model version served by other Open Inference Protocol servers (platform = "remote"): each
// request goes to one of the [remote] endpoints over a kept-alive connection, and on a failure
// to the next one, within the model's timeout.
//
//   absl::StatusOr<std::unique_ptr<RemoteRunner>> runner =
//       RemoteRunner::Create(config, "digits", options);
//   (*runner)->Infer(std::move(request), std::move(done));
//
// What it does with each request:
// - admission: at most endpoints x connections requests in flight, max_queue more waiting;
//   beyond that 503 with Retry-After at once;
// - the version's circuit breaker ([remote.backend_breaker]) answers at once while it is open;
// - the request is encoded once and sent to endpoints chosen by the EndpointSet (priority,
//   zone, health, breakers, load), each tried at most once per request; a kept-alive connection
//   the upstream had closed is retried once on a fresh one;
// - a connect failure, a timeout of the attempt, a 5xx, a 429 or a reply that does not decode
//   or does not match the model's outputs moves on to the next endpoint; any other 4xx ends the
//   request (the upstream refused what pillar sent: a configuration error, answered 502);
// - the deadline (timeout_ms from the request's arrival at the runner) bounds every attempt, and
//   an attempt cut off by it closes its connection, which is how HTTP tells a server to stop;
// - errors name the endpoint by its URL, never its credentials: 502 for an upstream failure,
//   504 at the deadline, 503 with the smallest Retry-After when every endpoint was throttled.
// A call's I/O runs on the event loop of the server thread that called Infer() (on the runner's
// own thread for callers without one): a proxied request is read, sent upstream, answered and
// written back without crossing a thread. Each version has its own connections, queue and
// limits, so one model's upstream cannot take another's connections; its own thread runs the
// active checks and reconfigurations. Breaker transitions are logged, counted and audited.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "audit/audit_sink.h"
#include "common/crypto.h"
#include "models/model_config.h"
#include "runtime/runner.h"
#include "upstream/breaker_sync.h"
#include "upstream/endpoint.h"
#include "upstream/upstream_metrics.h"

namespace pillar::upstream {

struct Call;  // one request, from admission to its answer (remote_state.h)

// What the server around a remote version gives it.
struct RemoteContext {
  // Gets this version's endpoints, labelled with the model's name, version and endpoint URL
  // (empty: not measured).
  UpstreamMetrics metrics;
  // This gateway's zone ([server] zone): endpoints in it are preferred while they hold up.
  std::string zone;
  // Where breaker transitions are recorded (null: nowhere); must outlive the runner.
  audit::AuditSink* audit = nullptr;
  // Whether [remote.health_check] runs (tests of passive health turn it off).
  bool active_checks = true;
  // Shares breaker trips with other instances (null: they stay in this one); must outlive the
  // runner.
  BreakerSync* breaker_sync = nullptr;
};

class RemoteRunner final : public runtime::Runner {
 public:
  // Reads the credentials file (which must not be readable by group or others) and the TLS
  // files now: a version that cannot reach its upstream as configured does not load.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteRunner>> Create(
      const models::ModelConfig& config, std::string_view model_name, std::string_view version,
      RemoteContext context = {});
  ~RemoteRunner() override;
  RemoteRunner(const RemoteRunner&) = delete;
  RemoteRunner& operator=(const RemoteRunner&) = delete;

  void Infer(protocol::InferenceRequest request, runtime::InferCallback done) override;
  // platform = "openai": the call goes to the endpoints' OpenAI-compatible route with the same
  // admission, choice of endpoint, retries, breakers and deadline as an inference; the body the
  // client sent, but for "model" (the upstream's name: [remote] model, or the endpoint's own);
  // a 200 is checked (an object with its choices or data, no error inside, a well-formed usage)
  // and passed on as it came.
  void Generate(runtime::GenerateRequest request, runtime::InferCallback done) override;
  bool Ready() const override { return true; }
  // A call whose request's cancellation is cancelled (its client went away) ends at once: out of
  // the queue, or its attempts cut off (their connections close, which is how HTTP tells an
  // upstream to stop) and its place given to the next.
  bool Cancellable() const override { return true; }
  // The live state, read under the runner's lock (held for bookkeeping only: replies are
  // decoded and requests encoded outside it).
  std::optional<runtime::UpstreamStatus> Upstreams() const override;
  // Takes `remote` into service (the version's signed [remote] with a backends file applied; the
  // upstream model name, idempotence, credentials and TLS files stay as signed): endpoints kept
  // (by Endpoint::place, the URL in one spelling) keep their health, breaker, latency, idle
  // connections and count of attempts in flight; attempts in flight finish where they are; a
  // request retries among the new endpoints, not twice at the same place.
  // Reads the TLS trust first when an https endpoint is new; on any error nothing changes.
  [[nodiscard]] absl::Status Reconfigure(const models::RemoteConfig& remote) override;

 private:
  struct State;
  explicit RemoteRunner(std::shared_ptr<State> state);
  // Admits `call` on the caller's event loop (or the runner's own thread, for callers without one),
  // ending it when `cancellation` (may be null) is cancelled.
  void Start(std::shared_ptr<Call> call, const std::shared_ptr<Cancellation>& cancellation);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace pillar::upstream
