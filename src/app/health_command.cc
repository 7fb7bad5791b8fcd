// `pillar health`: the node's checks against a machine family's thresholds.
#include <cstdio>

#include "app/commands.h"
#include "common/env.h"
#include "common/files.h"
#include "health/health_checks.h"
#include "health/health_config.h"
#include "health/health_report.h"

namespace pillar::app {

int RunHealth(const HealthOptions& options) {
  absl::StatusOr<health::HealthConfig> config = health::LoadHealthConfig(options.config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "pillar health: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  health::NodeProbe probe(options.root);
  const health::HealthReport report = health::RunHealthChecks(*config, probe);
  if (options.json) {
    std::printf("%s\n", health::HealthJson(report).c_str());
  } else {
    std::fputs(health::FormatHealthTable(report).c_str(), stdout);
  }
  if (!options.prometheus.empty()) {
    // Replaced whole: node_exporter's textfile collector never reads half a file.
    if (absl::Status s = PublishAtomically(*Env::Default(), options.prometheus,
                                           health::HealthPrometheus(report), 0644);
        !s.ok()) {
      std::fprintf(stderr, "pillar health: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  return report.ExitCode();
}

}  // namespace pillar::app
