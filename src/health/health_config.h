// What a healthy node of one kind looks like: thresholds read from a TOML file, one per machine
// family (configs/health/*.toml), like azurehpc-health-checks' per-SKU files. A section left
// out is a check not run; a key misspelt or of the wrong type is an error naming its line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::health {

struct CpuThresholds {
  std::optional<int> min_count;      // logical CPUs
  std::optional<std::string> model;  // a substring of /proc/cpuinfo's "model name"
};

struct MemoryThresholds {
  std::optional<double> min_total_gib;
  bool swap_off = false;
  std::optional<double> min_bandwidth_gbps;  // STREAM triad over all cores
  int bandwidth_mib = 512;                   // the triad's working set (three arrays)
};

struct DiskThresholds {
  std::string path;
  std::optional<double> min_free_gib;
  std::optional<double> min_write_mbps;  // sequential, fsynced; MB = 1e6 bytes
  int write_mib = 256;
};

struct NetworkThresholds {
  std::vector<std::string> interfaces_up;  // each must exist with operstate "up" (lo: "unknown")
};

struct ClockThresholds {
  bool synchronized = false;
  std::optional<double> max_error_ms;  // the kernel's maximum error estimate
};

struct GpuThresholds {
  std::optional<int> count;
  std::optional<int64_t> max_uncorrected_ecc;  // volatile, since the driver loaded
  std::optional<int64_t> max_corrected_ecc;
  std::optional<double> min_clock_ratio;        // SM application clock / maximum SM clock
  std::vector<std::string> forbidden_throttle;  // e.g. "hw_slowdown", "sw_thermal"
  std::optional<int> max_temperature_c;
  std::vector<int> forbidden_xids;  // XID errors in the kernel log that fail
  bool any_xid = false;             // every XID fails (forbidden_xids = ["all"])
  std::string kernel_log = "/dev/kmsg";
  std::string library = "libnvidia-ml.so.1";
};

struct CollectiveThresholds {
  std::string command;  // prints nccl-tests output; e.g. mpirun … pillar bench collective …
  double min_busbw_gbps = 0;
  int timeout_s = 600;
};

struct HealthConfig {
  std::string name;  // the machine family, for the report
  std::optional<CpuThresholds> cpu;
  std::optional<MemoryThresholds> memory;
  std::vector<DiskThresholds> disks;
  std::optional<NetworkThresholds> network;
  std::optional<ClockThresholds> clock;
  std::optional<GpuThresholds> gpu;
  std::optional<CollectiveThresholds> collective;
};

[[nodiscard]] absl::StatusOr<HealthConfig> ParseHealthConfig(std::string_view text,
                                                             std::string_view source);
[[nodiscard]] absl::StatusOr<HealthConfig> LoadHealthConfig(const std::string& path);

// The throttle reasons by name, as NVML's bits (nvmlClocksThrottleReasons*).
std::optional<uint64_t> ThrottleReasonBit(std::string_view name);
std::vector<std::string> ThrottleReasonNames(uint64_t bits);

}  // namespace pillar::health
