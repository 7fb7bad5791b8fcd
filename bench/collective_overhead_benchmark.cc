// What pillar's collective harness adds to each timed call, measured without the noise of a
// network: CollectiveRunner's timed loop over a Communicator whose collectives return at once
// (2 "ranks"). Prints nanoseconds per call; bench/run_collective.sh divides it by the time of
// a real MPI_Allreduce of each size to bound the harness's share of the measured bandwidth.
//
//   collective_overhead_benchmark [ITERS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/collective_options.h"
#include "bench/collective_runner.h"
#include "bench/communicator.h"

namespace {

class NullCommunicator final : public pillar::bench::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string Describe() const override { return "null"; }
  absl::Status Supports(pillar::bench::Collective, pillar::bench::DataType,
                        pillar::bench::ReduceOp) const override {
    return absl::OkStatus();
  }
  absl::Status Run(const pillar::bench::CollectiveCall& call) override {
    // Keep the call observable, as a real backend reads the call's fields.
    sink_ += call.count + size_t(call.in_place);
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::StatusOr<double> Combine(double value, pillar::bench::ReduceOp) override { return value; }
  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine) override {
    return std::vector<std::string>{std::string(mine), std::string(mine)};
  }
  size_t sink_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000000;
  auto options = pillar::bench::ParseCollectiveArgs(
      {"allreduce", "-b", "1K", "-e", "1K", "-c", "0", "-w", "0", "-n", std::to_string(iters)},
      nullptr);
  if (!options.ok()) return 2;
  NullCommunicator comm;
  pillar::bench::CollectiveRunner runner(comm, *options);
  const auto start = std::chrono::steady_clock::now();
  auto summary = runner.Run([](const pillar::bench::CollectiveRow&) {});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!summary.ok() || comm.sink_ == 0) return 1;
  // Two placements of `iters` calls each.
  std::printf("%.3f\n", seconds * 1e9 / (2.0 * iters));
  return 0;
}
