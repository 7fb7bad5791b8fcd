#include "bench/open_communicator.h"

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>

#include "common/strings.h"

#if PILLAR_HAVE_MPI
#include "bench/mpi_communicator.h"
#endif
#if PILLAR_HAVE_GLOO
#include "bench/gloo_communicator.h"
#endif

namespace pillar::bench {
namespace {

// The first of the launchers' variables that is set, as a non-negative integer. Only the Gloo
// backend asks (MPI knows its rank), so a build without Gloo does not use it.
[[maybe_unused]] std::optional<int> FromEnvironment(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      char* end = nullptr;
      const long n = std::strtol(value, &end, 10);
      if (*end == '\0' && n >= 0 && n < (1 << 24)) return int(n);
    }
  }
  return std::nullopt;
}

bool Launched() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenCommunicator(
    const CollectiveOptions& o) {
  const std::string backend = !o.backend.empty() ? o.backend : Launched() ? "mpi" : "gloo";
  if (backend == "mpi") {
#if PILLAR_HAVE_MPI
    return OpenMpiCommunicator();
#else
    return absl::FailedPreconditionError("this pillar was built without MPI (PILLAR_WITH_MPI=OFF)");
#endif
  }
#if PILLAR_HAVE_GLOO
  GlooOptions gloo;
  const std::optional<int> rank =
      o.rank ? o.rank
             : FromEnvironment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"});
  const std::optional<int> size =
      o.world_size
          ? o.world_size
          : FromEnvironment({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"});
  if (!rank || !size) {
    return absl::InvalidArgumentError(
        "gloo needs this process's rank and the rank count: --rank and --world-size, or a "
        "launcher's environment (SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE)");
  }
  if (o.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "gloo needs --rendezvous file:/shared/dir or redis://host:port (add --backend mpi to "
        "use MPI)");
  }
  gloo.rank = *rank;
  gloo.size = *size;
  gloo.rendezvous = o.rendezvous;
  gloo.job = o.job;
  gloo.iface = o.iface;
  return OpenGlooCommunicator(gloo);
#else
  return absl::FailedPreconditionError("this pillar was built without Gloo (PILLAR_WITH_GLOO=OFF)");
#endif
}

}  // namespace pillar::bench
