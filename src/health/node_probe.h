// What a node is, read from the kernel's files under a root directory ("/" in production, a
// fake /proc and /sys tree in tests) and from a few system calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar::health {

struct CpuFacts {
  int logical = 0;
  std::string model;  // the first "model name"
};

struct MemoryFacts {
  uint64_t total_bytes = 0;
  uint64_t swap_bytes = 0;
};

struct ClockFacts {
  bool synchronized = false;  // the kernel's NTP state (adjtimex): not STA_UNSYNC, not TIME_ERROR
  double max_error_ms = 0;
};

struct DiskFacts {
  uint64_t free_bytes = 0;  // available to an unprivileged user
};

class NodeProbe {
 public:
  explicit NodeProbe(std::string root = "/") : root_(std::move(root)) {}
  virtual ~NodeProbe() = default;

  [[nodiscard]] absl::StatusOr<CpuFacts> Cpu() const;
  [[nodiscard]] absl::StatusOr<MemoryFacts> Memory() const;
  // /sys/class/net/NAME/operstate: "up", "down", "unknown" (loopback), …; NotFound if absent.
  [[nodiscard]] absl::StatusOr<std::string> InterfaceState(std::string_view name) const;
  [[nodiscard]] virtual absl::StatusOr<ClockFacts> Clock() const;
  [[nodiscard]] virtual absl::StatusOr<DiskFacts> Disk(const std::string& path) const;
  // The kernel log's lines (a file, or /dev/kmsg read without blocking), at most 16 MiB.
  [[nodiscard]] absl::StatusOr<std::string> KernelLog(const std::string& path) const;

  // A path inside the root.
  std::string Path(std::string_view absolute) const;

 private:
  std::string root_;
};

}  // namespace pillar::health
