// Picks and opens the backend a run asks for (--backend), or the one its launcher implies.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "bench/collective_options.h"
#include "bench/communicator.h"

namespace pillar::bench {

// mpi when started by mpirun/srun (or asked for), gloo otherwise; a backend this build lacks,
// or gloo without a rank, world size or rendezvous, is a clear error.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenCommunicator(
    const CollectiveOptions& options);

}  // namespace pillar::bench
