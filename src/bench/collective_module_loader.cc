// Finds and loads libpillar_collective.so (common/module_loader.h). Part of the binary; links
// neither Open MPI nor Gloo.
#include "bench/collective_module.h"
#include "common/module_loader.h"

namespace pillar::bench {

[[nodiscard]] absl::StatusOr<CollectiveModule*> LoadCollectiveModule() {
  // RTLD_GLOBAL: Open MPI loads components of its own (mca_*.so) that expect libmpi's and
  // libopen-pal's symbols in the global scope.
  static constexpr ModuleSpec kSpec{.file_name = kCollectiveModuleFileName,
                                    .env_var = "PILLAR_COLLECTIVE_MODULE",
                                    .entry_point = kCollectiveEntryPoint,
                                    .needed_for = "pillar bench collective",
                                    .build_option = "the pillar_collective_module target",
                                    .global = true,
                                    .abi_version = kCollectiveModuleAbiVersion,
                                    .pillar_version = PILLAR_VERSION};
  return LoadModuleOnce<CollectiveModule>(kSpec);
}

}  // namespace pillar::bench
