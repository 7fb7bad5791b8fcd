// Runs the checks a HealthConfig asks for on this node and says, for each, what was measured
// against what was required. Exit codes follow the convention of node health checkers used in
// Slurm prologs: 0 healthy, 1 unhealthy (a threshold failed), 2 could not check.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "health/health_config.h"
#include "health/node_probe.h"

namespace pillar::health {

enum class CheckStatus { kPass, kFail, kError };
std::string_view CheckStatusName(CheckStatus status);  // "pass", "FAIL", "ERROR"

struct CheckResult {
  std::string name;  // "memory.total", "gpu3.ecc_uncorrected", "net.eth0"
  CheckStatus status = CheckStatus::kPass;
  std::string measured;         // "15.6 GiB"
  std::string required;         // ">= 1800 GiB"
  std::optional<double> value;  // the measurement as a number, for Prometheus
  std::string detail;           // why it could not be checked, or what failed
};

struct HealthReport {
  std::string name;
  std::vector<CheckResult> checks;
  // 1 when any check failed, else 2 when any could not be made, else 0.
  int ExitCode() const;
};

// The output of a command: its standard output and exit status.
struct CommandResult {
  std::string output;
  int exit_code = 0;
};
// Runs `command` with /bin/sh -c; a command still running after `timeout_s` is killed
// (DeadlineExceeded).
[[nodiscard]] absl::StatusOr<CommandResult> RunShellCommand(const std::string& command,
                                                            int timeout_s);

struct HealthOptions {
  std::function<absl::StatusOr<CommandResult>(const std::string&, int)> run_command =
      RunShellCommand;
  int threads = 0;  // for the memory triad; 0: every CPU
};

HealthReport RunHealthChecks(const HealthConfig& config, const NodeProbe& probe,
                             const HealthOptions& options = {});

// nccl-tests' summary: the sixth token of "# Avg bus bandwidth    : X" and the seventh of
// "# Out of bounds values : N OK". NotFound when the output has no such line.
struct CollectiveOutcome {
  double avg_busbw = 0;
  uint64_t wrong = 0;
};
[[nodiscard]] absl::StatusOr<CollectiveOutcome> ParseNcclTestsSummary(std::string_view output);

// XID numbers in kernel log lines such as "NVRM: Xid (PCI:0000:3b:00): 79, pid=…".
std::vector<int> ParseXids(std::string_view kernel_log);

}  // namespace pillar::health
