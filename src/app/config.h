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
  // [state]
  std::string state_path = "pillar.db";
  int64_t key_refresh_ms = 200;
  // [logging]
  std::string access_log = "-";
  // [runtime]
  int torch_threads = 1;
};

absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                   const std::string& base_directory);
absl::StatusOr<Config> LoadConfig(const std::string& path);

}  // namespace pillar::app
