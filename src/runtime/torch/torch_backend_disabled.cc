// Used when pillar is built with PILLAR_WITH_TORCH=OFF: every TorchScript model reports, per
// model, that this build cannot load it. The server still runs and says so in `ready`.
#include "runtime/torch/torch_backend.h"

namespace pillar::runtime {

void ConfigureTorch(int) {}
bool TorchAvailable() { return false; }
bool CudaAvailable() { return false; }

absl::StatusOr<std::string> ResolveDevice(models::DeviceKind) { return std::string("cpu"); }

absl::StatusOr<std::unique_ptr<Backend>> LoadTorchBackend(std::string_view, std::string_view source,
                                                          const models::ModelConfig&,
                                                          const std::string&) {
  return absl::FailedPreconditionError(
      std::string(source) + ": this build of pillar has no LibTorch (PILLAR_WITH_TORCH=OFF)");
}

}  // namespace pillar::runtime
