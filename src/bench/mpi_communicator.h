// The Open MPI backend: one rank per process, started by mpirun (or srun with PMIx), over
// whatever transport Open MPI picks (shared memory on a node, TCP, InfiniBand/UCX).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "bench/communicator.h"

namespace pillar::bench {

// Initialises MPI (once per process; finalised at exit) and wraps MPI_COMM_WORLD.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenMpiCommunicator();

}  // namespace pillar::bench
