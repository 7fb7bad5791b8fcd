// Finds and loads libpillar_collective.so (common/module_loader.h). Part of the binary; links
// neither Open MPI nor Gloo.
#include <mutex>

#include "bench/collective_module.h"
#include "common/module_loader.h"
#include "common/strings.h"

namespace pillar::bench {

absl::StatusOr<CollectiveModule*> LoadCollectiveModule() {
  // RTLD_GLOBAL: Open MPI loads components of its own (mca_*.so) that expect libmpi's and
  // libopen-pal's symbols in the global scope.
  static constexpr ModuleSpec kSpec{.file_name = kCollectiveModuleFileName,
                                    .env_var = "PILLAR_COLLECTIVE_MODULE",
                                    .entry_point = kCollectiveEntryPoint,
                                    .needed_for = "pillar bench collective",
                                    .build_option = "PILLAR_WITH_MPI or -DPILLAR_WITH_GLOO",
                                    .global = true};
  static std::once_flag once;
  static absl::StatusOr<CollectiveModule*>* loaded = nullptr;
  std::call_once(once, [] {
    absl::StatusOr<void*> entry = LoadModuleEntry(kSpec);
    if (!entry.ok()) {
      loaded = new absl::StatusOr<CollectiveModule*>(entry.status());
      return;
    }
    CollectiveModule* module = reinterpret_cast<CollectiveModule* (*)()>(*entry)();
    if (module == nullptr || module->abi_version() != kCollectiveModuleAbiVersion ||
        module->pillar_version() != PILLAR_VERSION) {
      loaded = new absl::StatusOr<CollectiveModule*>(absl::FailedPreconditionError(
          StrCat(kCollectiveModuleFileName, " is of another pillar build; this pillar is ",
                 PILLAR_VERSION, ", interface ", kCollectiveModuleAbiVersion)));
      return;
    }
    loaded = new absl::StatusOr<CollectiveModule*>(module);
  });
  return *loaded;
}

}  // namespace pillar::bench
