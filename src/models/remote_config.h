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
#include <vector>

#include "absl/status/status.h"

namespace pillar::models {

// One upstream endpoint: a base URL with its place in the set (upstream/endpoint_picker.h).
struct RemoteEndpoint {
  std::string url;   // http or https
  int weight = 1;    // its share of its priority group's traffic (1..1000)
  int priority = 1;  // 1 first; a higher number only when every endpoint above is out (1..100)
  std::string zone;  // where it runs (a label, shown; not used for routing yet)
};

struct RemoteConfig {
  // `endpoints = ["http://...", { url = "http://...", weight = 2, priority = 2, zone = "b" }]`:
  // a string, or an inline table for a weight, priority or zone; each URL once.
  std::vector<RemoteEndpoint> endpoints;
  std::string model;            // the upstream's name for the model; empty: the same name as here
  std::string version;          // the upstream's version; empty: its default
  int64_t timeout_ms = 30'000;  // the whole call, every attempt included
  int64_t connect_timeout_ms = 2'000;  // one connection (and TLS handshake)
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
};

// Reads the [remote] table of `root` into `out` with the strict errors of the rest of
// model.toml; at least one endpoint is required.
[[nodiscard]] absl::Status ReadRemoteSection(const toml::table& root, std::string_view source,
                                             RemoteConfig& out);

}  // namespace pillar::models
