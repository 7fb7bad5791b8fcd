// `pillar health`: the node's checks against a machine family's thresholds.
#include <cstdio>

#include "app/commands.h"
#include "common/env.h"
#include "common/files.h"
#include "health/health_checks.h"
#include "health/health_config.h"
#include "health/health_report.h"

namespace pillar::app {
namespace {

struct HealthOptions {
  std::string config_path;  // the machine family's thresholds (configs/health/*.toml)
  std::string root = "/";   // where /proc and /sys are read (tests point it at a fake tree)
  bool json = false;
  std::string prometheus;  // also write a node_exporter textfile here
};

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

}  // namespace

void AddHealthCommand(CLI::App& cli, Commands& commands) {
  auto health = std::make_shared<HealthOptions>();
  CLI::App* cmd = cli.add_subcommand(
      "health",
      "Check this node against thresholds; exit 0 healthy, 1 unhealthy, 2 could not check");
  cmd->add_option("-c,--config", health->config_path,
                  "Thresholds for this machine family (configs/health/*.toml)")
      ->required();
  cmd->add_flag("--json", health->json, "Machine-readable output");
  cmd->add_option("--prometheus", health->prometheus,
                  "Also write a Prometheus textfile (node_exporter textfile collector)");
  cmd->add_option("--root", health->root, "Read /proc and /sys under this directory");
  commands.On(cmd, [health] { return RunHealth(*health); });
}

}  // namespace pillar::app
