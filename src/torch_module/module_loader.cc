// Finds and loads libpillar_torch.so. Part of the binary; includes no LibTorch.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "common/strings.h"
#include "torch_module/torch_module.h"

namespace pillar::torch_module {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Candidates() {
  if (const char* path = std::getenv("PILLAR_TORCH_MODULE"); path != nullptr && *path != '\0') {
    return {path};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return {(exe.parent_path() / kModuleFileName).string(),
          (exe.parent_path().parent_path() / "lib" / "pillar" / kModuleFileName).string()};
}

std::string JoinPaths(const std::vector<std::string>& paths) {
  std::string joined;
  for (const std::string& path : paths) joined += (joined.empty() ? "" : " or ") + path;
  return joined;
}

}  // namespace

absl::StatusOr<TorchModule*> LoadTorchModuleFrom(const std::string& path) {
  // RTLD_LOCAL: the module's own copies of pillar's libraries stay its own. RTLD_NOW: a module
  // that cannot resolve a symbol fails here, with the loader's message, not in the middle of a
  // request.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    return absl::FailedPreconditionError(
        StrCat("cannot load the LibTorch module ", path, ": ", error ? error : "unknown error"));
  }
  using EntryPoint = TorchModule* (*)();
  auto entry = reinterpret_cast<EntryPoint>(::dlsym(handle, kEntryPoint));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        StrCat(path, " is not a pillar LibTorch module (it has no ", kEntryPoint, ")"));
  }
  TorchModule* module = entry();
  if (module == nullptr || module->abi_version() != kModuleAbiVersion ||
      module->pillar_version() != PILLAR_VERSION) {
    return absl::FailedPreconditionError(StrCat(
        path, " is a LibTorch module of another pillar build (",
        module == nullptr ? std::string("none") : std::string(module->pillar_version()),
        ", interface ", module == nullptr ? 0 : module->abi_version(), "; this pillar is ",
        PILLAR_VERSION, ", interface ", kModuleAbiVersion, ")"));
  }
  // Never closed: backends and their threads live until the process ends.
  return module;
}

absl::StatusOr<TorchModule*> LoadTorchModule() {
  static std::once_flag once;
  static absl::StatusOr<TorchModule*>* loaded = nullptr;
  std::call_once(once, [] {
    std::vector<std::string> tried;
    for (const std::string& path : Candidates()) {
      if (::access(path.c_str(), F_OK) != 0) {
        tried.push_back(path);
        continue;
      }
      loaded = new absl::StatusOr<TorchModule*>(LoadTorchModuleFrom(path));
      return;
    }
    loaded = new absl::StatusOr<TorchModule*>(absl::FailedPreconditionError(
        StrCat("this command needs the LibTorch module (", kModuleFileName, "), and there is "
               "none at ", tried.empty() ? std::string("any known place") : JoinPaths(tried),
               ": build pillar with -DPILLAR_WITH_TORCH=ON (the default), install the module "
               "beside the binary, or set PILLAR_TORCH_MODULE")));
  });
  return *loaded;
}

}  // namespace pillar::torch_module
