// Finds and loads libpillar_torch.so (common/module_loader.h). Part of the binary; includes no
// LibTorch.
#include "common/module_loader.h"

#include <mutex>

#include "common/strings.h"
#include "torch_module/torch_module.h"

namespace pillar::torch_module {
namespace {

constexpr ModuleSpec kSpec{.file_name = kModuleFileName,
                           .env_var = "PILLAR_TORCH_MODULE",
                           .entry_point = kEntryPoint,
                           .needed_for = "this command",
                           .build_option = "PILLAR_WITH_TORCH"};

absl::StatusOr<TorchModule*> Checked(absl::StatusOr<void*> entry, const std::string& where) {
  if (!entry.ok()) return entry.status();
  TorchModule* module = reinterpret_cast<TorchModule* (*)()>(*entry)();
  if (module == nullptr || module->abi_version() != kModuleAbiVersion ||
      module->pillar_version() != PILLAR_VERSION) {
    return absl::FailedPreconditionError(
        StrCat(where, " is a LibTorch module of another pillar build (",
               module == nullptr ? std::string("none") : std::string(module->pillar_version()),
               ", interface ", module == nullptr ? 0 : module->abi_version(), "; this pillar is ",
               PILLAR_VERSION, ", interface ", kModuleAbiVersion, ")"));
  }
  return module;
}

}  // namespace

absl::StatusOr<TorchModule*> LoadTorchModuleFrom(const std::string& path) {
  return Checked(LoadModuleEntryFrom(path, kSpec), path);
}

absl::StatusOr<TorchModule*> LoadTorchModule() {
  static std::once_flag once;
  static absl::StatusOr<TorchModule*>* loaded = nullptr;
  std::call_once(once, [] {
    loaded = new absl::StatusOr<TorchModule*>(Checked(LoadModuleEntry(kSpec), kModuleFileName));
  });
  return *loaded;
}

}  // namespace pillar::torch_module
