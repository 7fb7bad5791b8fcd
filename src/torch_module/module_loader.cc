// Finds and loads libpillar_torch.so (common/module_loader.h). Part of the binary; includes no
// LibTorch.
#include "common/module_loader.h"

#include "torch_module/torch_module.h"

namespace pillar::torch_module {
namespace {

constexpr ModuleSpec kSpec{.file_name = kModuleFileName,
                           .env_var = "PILLAR_TORCH_MODULE",
                           .entry_point = kEntryPoint,
                           .needed_for = "this command",
                           .build_option = "-DPILLAR_WITH_TORCH=ON",
                           .abi_version = kModuleAbiVersion,
                           .pillar_version = PILLAR_VERSION};

}  // namespace

[[nodiscard]] absl::StatusOr<TorchModule*> LoadTorchModuleFrom(const std::string& path) {
  return OpenModule<TorchModule>(LoadModuleEntryFrom(path, kSpec), kSpec, path);
}

[[nodiscard]] absl::StatusOr<TorchModule*> LoadTorchModule() {
  return LoadModuleOnce<TorchModule>(kSpec);
}

}  // namespace pillar::torch_module
