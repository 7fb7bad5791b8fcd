#include "health/health_checks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/strings.h"
#include "health/bandwidth.h"
#include "health/nvml_library.h"

namespace pillar::health {
namespace {

constexpr double kGiB = double(1ull << 30);

std::string Fixed(double v, int digits = 1) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, v);
  return buffer;
}

CheckResult Compare(std::string name, double measured, std::string_view unit, double bound,
                    bool at_least, int digits = 1) {
  CheckResult r;
  r.name = std::move(name);
  r.value = measured;
  r.measured = StrCat(Fixed(measured, digits), unit.empty() ? "" : " ", unit);
  r.required =
      StrCat(at_least ? ">= " : "<= ", Fixed(bound, digits), unit.empty() ? "" : " ", unit);
  const bool ok = at_least ? measured >= bound : measured <= bound;
  r.status = ok ? CheckStatus::kPass : CheckStatus::kFail;
  return r;
}

CheckResult Error(std::string name, std::string required, const absl::Status& why) {
  CheckResult r;
  r.name = std::move(name);
  r.status = CheckStatus::kError;
  r.measured = "-";
  r.required = std::move(required);
  r.detail = std::string(why.message());
  return r;
}

std::vector<std::string_view> Tokens(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    size_t end = at;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end > at) out.push_back(line.substr(at, end - at));
    at = end;
  }
  return out;
}

void CheckCpu(const CpuThresholds& t, const NodeProbe& probe, HealthReport& report) {
  absl::StatusOr<CpuFacts> cpu = probe.Cpu();
  if (!cpu.ok()) {
    report.checks.push_back(Error("cpu", "readable /proc/cpuinfo", cpu.status()));
    return;
  }
  if (t.min_count) {
    report.checks.push_back(Compare("cpu.count", cpu->logical, "", *t.min_count, true, 0));
  }
  if (t.model) {
    CheckResult r;
    r.name = "cpu.model";
    r.measured = cpu->model;
    r.required = StrCat("contains \"", *t.model, "\"");
    r.status =
        cpu->model.find(*t.model) != std::string::npos ? CheckStatus::kPass : CheckStatus::kFail;
    report.checks.push_back(r);
  }
}

void CheckMemory(const MemoryThresholds& t, const NodeProbe& probe, int threads,
                 HealthReport& report) {
  absl::StatusOr<MemoryFacts> memory = probe.Memory();
  if (!memory.ok()) {
    report.checks.push_back(Error("memory", "readable /proc/meminfo", memory.status()));
  } else {
    if (t.min_total_gib) {
      report.checks.push_back(Compare("memory.total", double(memory->total_bytes) / kGiB, "GiB",
                                      *t.min_total_gib, true));
    }
    if (t.swap_off) {
      CheckResult r = Compare("memory.swap", double(memory->swap_bytes) / kGiB, "GiB", 0, false);
      r.required = "off (0 GiB)";
      report.checks.push_back(r);
    }
  }
  if (t.min_bandwidth_gbps) {
    const double gbps = TriadBandwidth(size_t(t.bandwidth_mib) << 20, threads);
    if (gbps <= 0) {
      report.checks.push_back(
          Error("memory.bandwidth", "",
                absl::ResourceExhaustedError("could not allocate the triad's arrays")));
    } else {
      report.checks.push_back(
          Compare("memory.bandwidth", gbps, "GB/s", *t.min_bandwidth_gbps, true));
    }
  }
}

void CheckDisk(const DiskThresholds& t, const NodeProbe& probe, HealthReport& report) {
  const std::string name = StrCat("disk:", t.path);
  if (t.min_free_gib) {
    absl::StatusOr<DiskFacts> disk = probe.Disk(t.path);
    if (!disk.ok()) {
      report.checks.push_back(Error(StrCat(name, ".free"),
                                    StrCat(">= ", Fixed(*t.min_free_gib), " GiB"), disk.status()));
    } else {
      report.checks.push_back(Compare(StrCat(name, ".free"), double(disk->free_bytes) / kGiB, "GiB",
                                      *t.min_free_gib, true));
    }
  }
  if (t.min_write_mbps) {
    absl::StatusOr<double> mbps = SequentialWriteBandwidth(t.path, size_t(t.write_mib) << 20);
    if (!mbps.ok()) {
      report.checks.push_back(Error(
          StrCat(name, ".write"), StrCat(">= ", Fixed(*t.min_write_mbps), " MB/s"), mbps.status()));
    } else {
      report.checks.push_back(
          Compare(StrCat(name, ".write"), *mbps, "MB/s", *t.min_write_mbps, true, 0));
    }
  }
}

void CheckNetwork(const NetworkThresholds& t, const NodeProbe& probe, HealthReport& report) {
  for (const std::string& name : t.interfaces_up) {
    CheckResult r;
    r.name = StrCat("net.", name);
    r.required = "up";
    absl::StatusOr<std::string> state = probe.InterfaceState(name);
    if (!state.ok()) {
      r.status = CheckStatus::kFail;  // a missing interface is an unhealthy node, not a probe error
      r.measured = "absent";
      r.detail = std::string(state.status().message());
    } else {
      r.measured = *state;
      // The loopback interface reports "unknown": it has no carrier to be up or down.
      const bool up = *state == "up" || (name == "lo" && *state == "unknown");
      r.status = up ? CheckStatus::kPass : CheckStatus::kFail;
      r.value = up ? 1 : 0;
    }
    report.checks.push_back(r);
  }
}

void CheckClock(const ClockThresholds& t, const NodeProbe& probe, HealthReport& report) {
  absl::StatusOr<ClockFacts> clock = probe.Clock();
  if (!clock.ok()) {
    report.checks.push_back(Error("clock", "synchronised", clock.status()));
    return;
  }
  if (t.synchronized) {
    CheckResult r;
    r.name = "clock.synchronized";
    r.required = "yes";
    r.measured = clock->synchronized ? "yes" : "no";
    r.value = clock->synchronized ? 1 : 0;
    r.status = clock->synchronized ? CheckStatus::kPass : CheckStatus::kFail;
    report.checks.push_back(r);
  }
  if (t.max_error_ms) {
    report.checks.push_back(
        Compare("clock.max_error", clock->max_error_ms, "ms", *t.max_error_ms, false));
  }
}

// The per-device checks of one GPU; `forbidden_bits` are t.forbidden_throttle's reasons.
void CheckGpu(const GpuThresholds& t, const GpuFacts& g, uint64_t forbidden_bits,
              HealthReport& report) {
  const std::string prefix = StrCat("gpu", g.index);
  if (t.max_uncorrected_ecc) {
    if (g.ecc_uncorrected) {
      report.checks.push_back(Compare(StrCat(prefix, ".ecc_uncorrected"),
                                      double(*g.ecc_uncorrected), "",
                                      double(*t.max_uncorrected_ecc), false, 0));
    } else {
      report.checks.push_back(Error(StrCat(prefix, ".ecc_uncorrected"), "ECC on",
                                    absl::FailedPreconditionError("ECC is off or unsupported")));
    }
  }
  if (t.max_corrected_ecc && g.ecc_corrected) {
    report.checks.push_back(Compare(StrCat(prefix, ".ecc_corrected"), double(*g.ecc_corrected), "",
                                    double(*t.max_corrected_ecc), false, 0));
  }
  if (t.min_clock_ratio) {
    const unsigned clock = g.sm_app_clock_mhz != 0 ? g.sm_app_clock_mhz : g.sm_clock_mhz;
    const double ratio = g.sm_max_clock_mhz == 0 ? 0 : double(clock) / double(g.sm_max_clock_mhz);
    CheckResult r =
        Compare(StrCat(prefix, ".sm_clock_ratio"), ratio, "", *t.min_clock_ratio, true, 2);
    r.measured = StrCat(Fixed(ratio, 2), " (", clock, " of ", g.sm_max_clock_mhz, " MHz)");
    report.checks.push_back(r);
  }
  if (!t.forbidden_throttle.empty()) {
    CheckResult r;
    r.name = StrCat(prefix, ".throttle");
    const std::vector<std::string> active =
        ThrottleReasonNames(g.throttle_reasons & forbidden_bits);
    r.measured = active.empty() ? "none forbidden" : "";
    for (const std::string& a : active) r.measured += StrCat(r.measured.empty() ? "" : ",", a);
    r.required = "none of the forbidden reasons";
    r.value = double(active.size());
    r.status = active.empty() ? CheckStatus::kPass : CheckStatus::kFail;
    report.checks.push_back(r);
  }
  if (t.max_temperature_c) {
    report.checks.push_back(Compare(StrCat(prefix, ".temperature"), g.temperature_c, "C",
                                    *t.max_temperature_c, false, 0));
  }
}

// The kernel log's XIDs against t.any_xid and t.forbidden_xids, each forbidden one named once.
void CheckXids(const GpuThresholds& t, const NodeProbe& probe, HealthReport& report) {
  absl::StatusOr<std::string> log = probe.KernelLog(t.kernel_log);
  if (!log.ok()) {
    report.checks.push_back(Error("gpu.xid", "no forbidden XID", log.status()));
    return;
  }
  std::vector<int> seen;
  for (int xid : ParseXids(*log)) {
    const bool forbidden = t.any_xid || std::find(t.forbidden_xids.begin(), t.forbidden_xids.end(),
                                                  xid) != t.forbidden_xids.end();
    if (forbidden && std::find(seen.begin(), seen.end(), xid) == seen.end()) seen.push_back(xid);
  }
  CheckResult r;
  r.name = "gpu.xid";
  r.required = "no forbidden XID in the kernel log";
  r.value = double(seen.size());
  r.measured = seen.empty() ? "none" : "";
  for (int xid : seen) r.measured += StrCat(r.measured.empty() ? "XID " : ", ", xid);
  r.status = seen.empty() ? CheckStatus::kPass : CheckStatus::kFail;
  report.checks.push_back(r);
}

void CheckGpus(const GpuThresholds& t, const NodeProbe& probe, HealthReport& report) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml = NvmlLibrary::Load(t.library);
  if (!nvml.ok()) {
    // No driver where GPUs are expected: the node cannot be vouched for.
    report.checks.push_back(Error("gpu", "NVML", nvml.status()));
    return;
  }
  absl::StatusOr<std::vector<GpuFacts>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) {
    report.checks.push_back(Error("gpu", "NVML", gpus.status()));
    return;
  }
  if (t.count)
    report.checks.push_back(Compare("gpu.count", double(gpus->size()), "", *t.count, true, 0));
  uint64_t forbidden_bits = 0;
  for (const std::string& name : t.forbidden_throttle)
    forbidden_bits |= ThrottleReasonBit(name).value_or(0);
  for (const GpuFacts& g : *gpus) CheckGpu(t, g, forbidden_bits, report);
  if (t.any_xid || !t.forbidden_xids.empty()) CheckXids(t, probe, report);
}

void CheckCollective(const CollectiveThresholds& t, const HealthOptions& options,
                     HealthReport& report) {
  const std::string required = StrCat(">= ", Fixed(t.min_busbw_gbps, 2), " GB/s");
  absl::StatusOr<CommandResult> ran = options.run_command(t.command, t.timeout_s);
  if (!ran.ok()) {
    report.checks.push_back(Error("collective.busbw", required, ran.status()));
    return;
  }
  absl::StatusOr<CollectiveOutcome> outcome = ParseNcclTestsSummary(ran->output);
  if (!outcome.ok()) {
    report.checks.push_back(
        Error("collective.busbw", required,
              absl::UnavailableError(StrCat("`", t.command, "` exited ", ran->exit_code, ": ",
                                            outcome.status().message()))));
    return;
  }
  CheckResult wrong = Compare("collective.wrong", double(outcome->wrong), "", 0, false, 0);
  wrong.required = "0";
  report.checks.push_back(wrong);
  report.checks.push_back(
      Compare("collective.busbw", outcome->avg_busbw, "GB/s", t.min_busbw_gbps, true, 2));
}

}  // namespace

std::string_view CheckStatusName(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass:
      return "pass";
    case CheckStatus::kFail:
      return "FAIL";
    case CheckStatus::kError:
      return "ERROR";
  }
  return "?";
}

int HealthReport::ExitCode() const {
  bool error = false;
  for (const CheckResult& c : checks) {
    if (c.status == CheckStatus::kFail) return 1;
    if (c.status == CheckStatus::kError) error = true;
  }
  return error ? 2 : 0;
}

[[nodiscard]] absl::StatusOr<CollectiveOutcome> ParseNcclTestsSummary(std::string_view output) {
  CollectiveOutcome outcome;
  bool have_bw = false;
  for (std::string_view line : Split(output, '\n')) {
    const std::vector<std::string_view> tokens = Tokens(line);
    if (line.starts_with("# Avg bus bandwidth") && tokens.size() >= 6) {
      const std::string text(tokens[5]);
      char* stop = nullptr;
      const double bw = std::strtod(text.c_str(), &stop);
      if (*stop != '\0' || !std::isfinite(bw)) {
        return absl::DataLossError(StrCat("bad bandwidth '", text, "'"));
      }
      outcome.avg_busbw = bw;
      have_bw = true;
    } else if (line.starts_with("# Out of bounds values") && tokens.size() >= 7) {
      const std::string text(tokens[6]);
      char* stop = nullptr;
      const unsigned long long n = std::strtoull(text.c_str(), &stop, 10);
      if (*stop != '\0') return absl::DataLossError(StrCat("bad error count '", text, "'"));
      outcome.wrong += n;
    }
  }
  if (!have_bw) return absl::NotFoundError("no \"# Avg bus bandwidth\" line in its output");
  return outcome;
}

std::vector<int> ParseXids(std::string_view log) {
  std::vector<int> xids;
  size_t at = 0;
  while ((at = log.find("NVRM: Xid", at)) != std::string_view::npos) {
    size_t line_end = log.find('\n', at);
    if (line_end == std::string_view::npos) line_end = log.size();
    const std::string_view line = log.substr(at, line_end - at);
    at = line_end;
    const size_t close = line.find("): ");
    if (close == std::string_view::npos) continue;
    int xid = 0;
    size_t i = close + 3;
    bool digits = false;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9' && xid < 1000000) {
      xid = xid * 10 + (line[i] - '0');
      ++i;
      digits = true;
    }
    if (digits) xids.push_back(xid);
  }
  return xids;
}

[[nodiscard]] absl::StatusOr<CommandResult> RunShellCommand(const std::string& command,
                                                            int timeout_s) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return absl::InternalError(StrCat("pipe: ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int null = open("/dev/null", O_RDONLY);  // nothing of ours for it (or mpirun) to read
    if (null >= 0) dup2(null, STDIN_FILENO);
    setpgid(0, 0);  // its own group, so a timeout kills mpirun and its ranks together
    // A command's pipes and hang-ups behave as in a shell even when this process ignores
    // SIGPIPE and SIGHUP (serve does): an ignored disposition would survive the exec.
    signal(SIGPIPE, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: a kill may come before the child has run setpgid
  close(out[1]);
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool timed_out = false;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n > 0) {
      if (result.output.size() < (64u << 20)) result.output.append(buffer, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(out[0]);
  // Its output may end before it does (a command that closes stdout and runs on): the wait
  // keeps to the same deadline.
  int status = 0;
  while (!timed_out) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (timed_out) {
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) {
    return absl::DeadlineExceededError(StrCat("`", command, "` ran longer than ", timeout_s, " s"));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

HealthReport RunHealthChecks(const HealthConfig& config, const NodeProbe& probe,
                             const HealthOptions& options) {
  HealthReport report;
  report.name = config.name;
  const int threads = options.threads > 0 ? options.threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  if (config.cpu) CheckCpu(*config.cpu, probe, report);
  if (config.memory) CheckMemory(*config.memory, probe, threads, report);
  for (const DiskThresholds& disk : config.disks) CheckDisk(disk, probe, report);
  if (config.network) CheckNetwork(*config.network, probe, report);
  if (config.clock) CheckClock(*config.clock, probe, report);
  if (config.gpu) CheckGpus(*config.gpu, probe, report);
  if (config.collective) CheckCollective(*config.collective, options, report);
  return report;
}

}  // namespace pillar::health
