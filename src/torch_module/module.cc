// The LibTorch module's entry point: libpillar_torch.so exports one symbol, which returns the
// TorchModule that the binary calls through (torch_module.h). Built only with LibTorch.
#include <torch/cuda.h>

#include "torch_module/torch_backend.h"
#include "torch_module/torch_module.h"
#include "torch_module/torch_state.h"

namespace pillar::torch_module {

int RunTrain(const TrainOptions& options);  // train.cc

namespace {

class Module final : public TorchModule {
 public:
  int abi_version() const override { return kModuleAbiVersion; }
  std::string_view pillar_version() const override { return PILLAR_VERSION; }
  void ConfigureThreads(int threads) override { runtime::ConfigureTorch(threads); }
  bool CudaAvailable() override { return runtime::CudaAvailable(); }
  [[nodiscard]] absl::StatusOr<std::string> ResolveDevice(models::DeviceKind kind) override {
    return runtime::ResolveDevice(kind);
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<runtime::Backend>> LoadBackend(
      std::string_view model_bytes, std::string_view source, const models::ModelConfig& config,
      const std::string& device) override {
    return runtime::LoadTorchBackend(model_bytes, source, config, device);
  }
  int Train(const TrainOptions& options) override { return RunTrain(options); }
  [[nodiscard]] absl::Status ExportStateDict(const ckpt::LoadedCheckpoint& checkpoint,
                                             const std::string& path) override {
    return ckpt::ExportStateDict(checkpoint, path);
  }
};

}  // namespace
}  // namespace pillar::torch_module

extern "C" __attribute__((visibility("default"))) pillar::torch_module::TorchModule*
pillar_torch_module_v1() {
  static pillar::torch_module::Module* module = new pillar::torch_module::Module;
  return module;
}
