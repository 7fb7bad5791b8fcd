// pillar's configuration file (TOML). Every field, its default and its meaning is listed in
// docs/configuration.md; unknown sections and keys are errors, so a typo never silently falls
// back to a default.
//
//   absl::StatusOr<Config> config = LoadConfig("pillar.toml");   // "" gives the defaults
// Relative paths in the file are resolved against the file's directory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "http/server.h"

namespace pillar::app {

struct Config {
  static http::ListenerOptions Listener(std::string name, uint16_t port) {
    http::ListenerOptions options;
    options.name = std::move(name);
    options.port = port;
    return options;
  }

  // [server]
  int threads = 0;  // 0: one per core
  int64_t drain_timeout_ms = 30000;
  bool strict_readiness = true;
  // [data] and [admin]
  http::ListenerOptions data = Listener("data", 8000);
  http::ListenerOptions admin = Listener("admin", 8001);
  // [limits]
  http::Limits limits;
  // [repository]
  std::string repository_path = "models";
  std::string version_policy = "latest";
  std::map<std::string, std::string> model_policies;
  // Only versions whose model.sig.json verifies against one of these public keys are served.
  bool require_signatures = true;
  std::vector<std::string> trusted_keys;
  // The private key `pillar model push|promote|rollback` sign versions and alias files with
  // (their --key overrides it); the server never reads it. Empty: give --key.
  std::string repository_signing_key;
  int64_t reverify_interval_ms = 60'000;  // 0: verify only at load
  int64_t poll_ms = 1000;  // how often the store is scanned for new versions and alias moves
  std::string default_alias = "prod";  // where requests without a version go, when it exists
  // [state]
  std::string state_path = "pillar.db";
  int64_t key_refresh_ms = 200;
  int64_t key_touch_ms = 10'000;  // how often last-used times are written back
  // [logging]
  std::string access_log = "-";
  // [runtime]
  int torch_threads = 1;
  // [policy]
  std::string policy_path;  // empty: the built-in policy
  int64_t policy_reload_ms = 1000;
  // [limiter]
  std::string limiter_backend = "embedded";  // or "redis"
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::string redis_password_file;
  int64_t redis_timeout_ms = 250;
  std::string redis_key_prefix = "pillar";
  std::string on_redis_failure = "closed";  // or "open": a local limiter at 1/instances
  int64_t instances = 1;
  int64_t lease_ttl_ms = 60'000;
  int64_t quota_flush_ms = 1000;
  // [jwt] (off unless jwks is set)
  struct Jwt {
    std::string jwks;
    std::string issuer;
    std::vector<std::string> audiences;
    int64_t clock_skew_s = 60;
    int64_t reload_ms = 1000;
    std::string subject_claim = "sub";
    std::string tenant_claim;
    std::string roles_claim = "roles";
    std::map<std::string, std::string> attributes;  // attribute -> claim
  } jwt;
  // [audit]
  struct Audit {
    std::string backend = "file";  // "file", "postgres" or "off"
    std::string file = "audit.log";
    std::string postgres;                  // a libpq connection string
    std::string instance;                  // the chain's name; empty: the host name
    std::string signing_key;               // Ed25519 private key for checkpoints; empty: none
    std::vector<std::string> public_keys;  // what `pillar audit verify` trusts
    int64_t checkpoint_interval_ms = 60'000;
    std::string fsync = "interval";  // "batch", "interval" or "off"
    int64_t fsync_interval_ms = 10;
    int64_t queue_capacity = 65536;
    std::string on_full = "drop";  // or "refuse"
  } audit;
  // [[mtls_client]]
  struct CertificateClient {
    std::string tenant;
    std::vector<std::string> roles;
    std::map<std::string, std::vector<std::string>> attributes;
  };
  std::map<std::string, CertificateClient> certificate_clients;  // by identity
};

[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                                 const std::string& base_directory);
[[nodiscard]] absl::StatusOr<Config> LoadConfig(const std::string& path);

}  // namespace pillar::app
