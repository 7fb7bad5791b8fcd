// The collective benchmark's communicators (Open MPI and Gloo) live in a module,
// libpillar_collective.so, loaded the first time `pillar bench collective` opens one: linking
// Open MPI and Gloo cost every pillar command their loading (about 2.6 ms here, more than a
// small native command's whole start). The sweep, the checks and the output stay in the binary;
// only opening a communicator crosses into the module.
//
//   PILLAR_ASSIGN_OR_RETURN(CollectiveModule* module, LoadCollectiveModule());
//   PILLAR_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, module->Open(options));
// Communicator and CollectiveOptions cross the boundary by layout, so a module is used only by
// the binary of its own version and interface number.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "bench/collective_options.h"
#include "bench/communicator.h"

namespace pillar::bench {

inline constexpr int kCollectiveModuleAbiVersion = 1;
inline constexpr char kCollectiveEntryPoint[] = "pillar_collective_module_v1";
inline constexpr char kCollectiveModuleFileName[] = "libpillar_collective.so";

class CollectiveModule {
 public:
  virtual ~CollectiveModule() = default;
  virtual int abi_version() const = 0;
  virtual std::string_view pillar_version() const = 0;
  // The backend `options` names (or the launcher's: MPI under mpirun, else Gloo).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Communicator>> Open(
      const CollectiveOptions& options) = 0;
};

// Loads the module once per process; FailedPrecondition naming it and where it was looked for
// ($PILLAR_COLLECTIVE_MODULE, beside the binary, ../lib/pillar/) when there is none.
[[nodiscard]] absl::StatusOr<CollectiveModule*> LoadCollectiveModule();

}  // namespace pillar::bench
