// Runs nccl-tests' sweep on one Communicator: for each type, reduction and size, the
// out-of-place and the in-place collective, timed over -n iterations after -w warm-ups, then
// (with -c) once more on known inputs with every output element checked.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/collective_options.h"
#include "bench/communicator.h"

namespace pillar::bench {

struct Placement {
  double seconds = 0;  // per collective, combined over ranks as -a says
  Bandwidth bandwidth;
  std::optional<uint64_t> wrong;  // none without -c
};

struct CollectiveRow {
  size_t bytes = 0;  // the size column
  size_t count = 0;
  DataType type = DataType::kFloat;
  std::optional<ReduceOp> op;  // none for collectives that do not reduce
  int root = -1;
  Placement out_of_place;
  Placement in_place;
};

struct CollectiveSummary {
  std::vector<CollectiveRow> rows;   // empty for a run without end (-N 0)
  std::vector<std::string> skipped;  // combinations the backend cannot run, and why
  uint64_t wrong = 0;                // every row's, both placements
  double avg_busbw = 0;              // over every row, both placements
};

// OK when this machine can hold the two buffers of -e's size (checked before ranks meet, and
// again by Run()); otherwise the reason.
[[nodiscard]] absl::Status CheckFitsInMemory(const CollectiveOptions& options);

class CollectiveRunner {
 public:
  CollectiveRunner(Communicator& comm, const CollectiveOptions& options)
      : comm_(comm), options_(options) {}

  // Calls `on_row` as each row completes (every rank gets the same rows). Fails on a backend
  // error, or when the one combination asked for is one the backend cannot run.
  [[nodiscard]] absl::StatusOr<CollectiveSummary> Run(
      const std::function<void(const CollectiveRow&)>& on_row);

  // The sizes of the sweep, as nccl-tests steps them.
  static std::vector<size_t> Sizes(const CollectiveOptions& options);

 private:
  [[nodiscard]] absl::StatusOr<Placement> Measure(CollectiveCall call, size_t send_elements,
                                                  size_t recv_elements);

  Communicator& comm_;
  const CollectiveOptions& options_;
  std::vector<std::byte> send_;
  std::vector<std::byte> recv_;
};

}  // namespace pillar::bench
