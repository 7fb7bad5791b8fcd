// pillar's configuration file (TOML). Every field, its default and its meaning is listed in
// docs/configuration.md; unknown sections and keys are errors, so a typo never silently falls
// back to a default. Each part reads its own sections into its own options (the listener's in
// http/listener_config.h, the store's in models/repository_options.h, and so on); this file
// holds them together with the few sections that only the wiring reads.
//
//   absl::StatusOr<Config> config = LoadConfig("pillar.toml");   // "" gives the defaults
// Relative paths in the file are resolved against the file's directory.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "audit/audit_config.h"
#include "guard/guard_config.h"
#include "http/listener_config.h"
#include "http/server.h"
#include "identity/identity_config.h"
#include "jobs/job_options.h"
#include "limits/limiter_config.h"
#include "models/repository_options.h"

namespace pillar::app {

struct Config {
  // [server]
  int threads = 0;  // 0: one per core
  absl::Duration drain_timeout = absl::Seconds(30);
  bool strict_readiness = true;
  // Where this instance runs (a label): remote endpoints with the same zone are preferred.
  std::string zone;
  // [data] and [admin]
  http::ListenerOptions data = http::ListenerNamed("data", 8000);
  http::ListenerOptions admin = http::ListenerNamed("admin", 8001);
  http::Limits limits;                   // [limits]
  models::RepositoryOptions repository;  // [repository]
  // [state]
  std::string state_path = "pillar.db";
  absl::Duration key_refresh = absl::Milliseconds(200);
  absl::Duration key_touch = absl::Seconds(10);  // how often last-used times are written back
  // [logging]
  std::string access_log = "-";
  // [runtime]
  int torch_threads = 1;
  // [policy]
  std::string policy_path;  // empty: the built-in policy
  absl::Duration policy_reload = absl::Seconds(1);
  // [upstream]: the backends file (models/backends_file.h); empty: none. Checked for changes
  // every backends_reload (0: read once).
  std::string backends_file;
  absl::Duration backends_reload = absl::Seconds(1);
  limits::LimiterConfig limiter;            // [limiter]
  std::optional<identity::JwtOptions> jwt;  // [jwt]; nullopt: tokens are not accepted
  audit::AuditConfig audit;                 // [audit]
  jobs::JobOptions jobs;                    // [jobs]
  // [guard]: content safety for language models' calls; null without the section.
  std::shared_ptr<const guard::GuardConfig> guard;
  std::map<std::string, identity::CertificateClient> certificate_clients;  // [[mtls_client]]
};

[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                                 const std::string& base_directory);
[[nodiscard]] absl::StatusOr<Config> LoadConfig(const std::string& path);

}  // namespace pillar::app
