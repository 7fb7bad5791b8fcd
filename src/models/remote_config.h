// The [remote] table of a model.toml whose platform is "remote": the model is served by one or
// more other Open Inference Protocol servers (another pillar, Triton, KServe, MLServer), with
// pillar's controls in front of them (docs/formats/model_store.md, docs/resilience.md).
//
//   platform = "remote"
//   [remote]
//   endpoints = ["http://10.0.0.5:8000", "https://gpu-2.internal:8443"]
//   model = "digits"               # its name upstream (default: the same name)
//   credentials_file = "/etc/pillar/upstream.token"
//
// The table is part of the signed version, so where a model's traffic goes is signed with it;
// the secret itself is never in it, only the path of a file only pillar can read.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace pillar::models {

// One upstream endpoint: a base URL with its place in the set (upstream/endpoint_picker.h).
struct RemoteEndpoint {
  std::string url;   // http or https
  int weight = 1;    // its share of its priority group's traffic (1..1000)
  int priority = 1;  // 1 first; a higher number only when every endpoint above is out (1..100)
  std::string zone;  // where it runs: preferred by a gateway in the same zone ([server] zone)
  // platform = "openai": this endpoint's name for the model, when it is not [remote] model (one
  // deployment calls it "gpt-4o-mini", another "llama-3-8b-instruct").
  std::string model;
  bool operator==(const RemoteEndpoint&) const = default;
};

// A circuit breaker's rule, in the vocabulary of Azure API Management's backend circuit breaker
// (upstream/circuit_breaker.h): it trips when, within `interval_ms`, `failure_count` requests
// failed, or `failure_percentage` of at least `min_requests` did; it then answers at once for
// `trip_duration_ms` (or for an upstream's Retry-After, when `accept_retry_after`), and lets
// `half_open_probes` requests through to decide whether to close.
//
//   [remote.breaker]                       # each endpoint's
//   failure_count = 5
//   interval_ms = 10000
//   status_codes = ["500-599", "429"]      # which upstream statuses count as failures
//   error_reasons = ["connect", "timeout", "bad_reply"]
//   trip_duration_ms = 30000
struct BreakerRule {
  int failure_count = 0;       // 0: not by count
  int failure_percentage = 0;  // 0: not by share
  int min_requests = 20;       // for failure_percentage: fewer requests in the interval never trip
  int64_t interval_ms = 10'000;
  // Statuses that count as failures, as inclusive ranges; any other reply is a success.
  std::vector<std::pair<int, int>> status_codes = {{500, 599}};
  // Failures without a status that count: a connection that could not be made or broke, an
  // attempt past its time, a reply that does not decode or match the model.
  bool count_connect = true;
  bool count_timeout = true;
  bool count_bad_reply = true;
  int64_t trip_duration_ms = 30'000;
  bool accept_retry_after = true;
  int half_open_probes = 1;
  // Off when neither threshold is set.
  bool enabled() const { return failure_count > 0 || failure_percentage > 0; }
  bool CountsStatus(int status) const;
  bool operator==(const BreakerRule&) const = default;
};

// Active health checks: a GET of each endpoint's readiness route every interval_ms. An endpoint
// failing unhealthy_threshold checks in a row is out of service until healthy_threshold pass in
// a row (Envoy's health checking; its interval and thresholds are the defaults).
struct HealthCheck {
  bool enabled = true;
  std::string path = "/v2/health/ready";  // after the endpoint's base path
  int64_t interval_ms = 10'000;
  int64_t timeout_ms = 1'000;
  int healthy_threshold = 1;
  int unhealthy_threshold = 2;
  bool operator==(const HealthCheck&) const = default;
};

// Hedged requests: when a request's attempt has not answered after the `quantile` of the version's
// recent attempt latencies (at least min_delay_ms), a second attempt goes to another endpoint, and
// the first usable answer wins while the other is cancelled. Off by default (it adds load); for
// idempotent models only, and each hedge needs a place in the retry budget.
struct HedgeConfig {
  bool enabled = false;
  double quantile = 0.95;
  int64_t min_delay_ms = 5;
  int max_hedges = 1;  // extra attempts in flight at once per request
  bool operator==(const HedgeConfig&) const = default;
};

struct RemoteConfig {
  // `endpoints = ["http://...", { url = "http://...", weight = 2, priority = 2, zone = "b" }]`:
  // a string, or an inline table for a weight, priority or zone; each URL once.
  std::vector<RemoteEndpoint> endpoints;
  std::string model;            // the upstream's name for the model; empty: the same name as here
  std::string version;          // the upstream's version; empty: its default
  int64_t timeout_ms = 30'000;  // the whole call, every attempt included
  int64_t connect_timeout_ms = 2'000;  // one connection (and TLS handshake)
  // One attempt (Envoy's per_try_timeout): an endpoint that has not answered within it is a
  // failure of that endpoint, and the request moves on to another while its deadline allows.
  // 0: an attempt may take the whole timeout_ms.
  int64_t attempt_timeout_ms = 0;
  int64_t max_response_bytes = 64 << 20;
  int connections = 16;      // per endpoint, kept alive between requests
  int64_t max_queue = 1024;  // requests waiting for a connection; beyond: 503 + Retry-After
  // Passive health, after Envoy's outlier detection (upstream/endpoint_health.h): this many
  // failures in a row eject an endpoint for base_ejection_ms x its ejections, capped at
  // max_ejection_ms; at most max_ejection_percent of the endpoints (at least one) are out at once.
  int consecutive_failures = 5;
  int64_t base_ejection_ms = 30'000;
  int64_t max_ejection_ms = 300'000;
  int max_ejection_percent = 10;
  // Retries (after Envoy's retry policy and budget): an inference is sent again, to another
  // endpoint, only when it is idempotent (a model that is not says idempotent = false: then only
  // a request that never reached an upstream is retried); at most max(min_retry_concurrency,
  // retry_budget_percent of the requests in flight) requests are retrying at once, so retries
  // cannot multiply an outage; each retry waits a random time up to
  // min(retry_backoff_max_ms, retry_backoff_base_ms x 2^retries) (full jitter), never past the
  // deadline.
  bool idempotent = true;
  int retry_budget_percent = 20;
  int min_retry_concurrency = 3;
  int64_t retry_backoff_base_ms = 25;
  int64_t retry_backoff_max_ms = 250;
  // A file holding the bearer token to send upstream (one line); must be readable by its owner
  // only. Empty: no Authorization header.
  std::string credentials_file;
  // TLS to https endpoints: the CA bundle that signed them (empty: the system's store), and a
  // client certificate and key when the upstream asks for mutual TLS.
  std::string ca_file;
  std::string client_certificate;
  std::string client_key;
  // platform = "openai": the header the credential goes in ("authorization" sends it as
  // "Bearer <token>"; Azure OpenAI's "api-key" sends it as it is), and the api-version query
  // parameter Azure OpenAI requires (empty: none).
  std::string api_key_header = "authorization";
  std::string api_version;
  // [remote.breaker]: each endpoint's circuit breaker (off unless a threshold is set: outlier
  // ejection above already takes a failing endpoint out). [remote.backend_breaker]: the whole
  // version's, on the outcome of each request after its retries; on by default, so that a
  // backend that fails answers at once (and its fallback chain takes over) instead of making
  // every caller wait for its failure.
  BreakerRule breaker;
  BreakerRule backend_breaker = DefaultBackendBreaker();
  // [remote.health_check]
  HealthCheck health_check;
  // [remote.hedge]
  HedgeConfig hedge;
  // Field by field: a backends file read again that says the same changes nothing in service.
  bool operator==(const RemoteConfig&) const = default;

  static BreakerRule DefaultBackendBreaker() {
    BreakerRule rule;
    rule.failure_percentage = 50;
    rule.min_requests = 20;
    rule.interval_ms = 10'000;
    rule.trip_duration_ms = 10'000;
    rule.status_codes = {{502, 504}};
    return rule;
  }
};

// Where `url` points, as one spelling: scheme and host in lower case, no leading zeros in the
// port, no trailing slashes ("http://A:08000/" and "http://a:8000" are one place). Another name
// or address form for the same host is another place. What an endpoint is known by: in a list
// (each place once), across reloads of a backends file, and between instances sharing breakers.
std::string EndpointPlace(std::string_view url);

// Reads the [remote] table of `root` into `out` with the strict errors of the rest of
// model.toml; at least one endpoint is required.
[[nodiscard]] absl::Status ReadRemoteSection(const toml::table& root, std::string_view source,
                                             RemoteConfig& out);

// Applies a backends file's table for one model (models/backends_file.h) onto `out`, the
// version's signed [remote]: only the keys that say where traffic goes and how it is balanced,
// checked, broken, retried and timed; `model`, `version`, `idempotent` and the credential and TLS
// keys stay as signed (an unknown key is an error naming `name`). `endpoints`, when present,
// replaces the list. The result is checked as a whole.
[[nodiscard]] absl::Status ApplyRemoteOverride(const toml::table& table, std::string_view name,
                                               std::string_view source, RemoteConfig& out);

}  // namespace pillar::models
