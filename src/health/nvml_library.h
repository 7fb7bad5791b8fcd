// NVIDIA's management library, loaded at run time (dlopen) so that one pillar binary runs on
// nodes with and without a GPU driver. Only the calls the health checks need, declared here
// from NVML's documented C ABI (nvml.h is not needed to build).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::health {

struct GpuFacts {
  int index = 0;
  std::string name;
  std::optional<uint64_t> ecc_uncorrected;  // volatile; none when ECC is off or unsupported
  std::optional<uint64_t> ecc_corrected;
  unsigned sm_clock_mhz = 0;      // now
  unsigned sm_app_clock_mhz = 0;  // the clock it runs work at
  unsigned sm_max_clock_mhz = 0;
  uint64_t throttle_reasons = 0;  // nvmlClocksThrottleReason* bits
  unsigned temperature_c = 0;
};

class NvmlLibrary {
 public:
  // NotFound when the library is absent (no driver: GPU checks cannot run); an error naming
  // the call when it is there but fails to initialise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Load(const std::string& path);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  [[nodiscard]] absl::StatusOr<std::vector<GpuFacts>> Gpus();

  struct Api;

 private:
  NvmlLibrary(void* handle, std::unique_ptr<Api> api);
  void* handle_;
  std::unique_ptr<Api> api_;
};

}  // namespace pillar::health
