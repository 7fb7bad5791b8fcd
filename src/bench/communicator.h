// One communication library behind the collective benchmark: Open MPI, Gloo, later NCCL.
// A backend runs the seven collectives on host buffers with nccl-tests' buffer conventions, so
// the runner and its correctness check are the same for every backend.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/collective.h"

namespace pillar::bench {

// One collective call. `count` is nccl-tests' count column: elements per rank for allreduce,
// broadcast, reduce and sendrecv; per rank's share for allgather and reducescatter; per peer
// for alltoall. Out of place, `send` and `recv` are separate buffers of CollectiveCounts()'
// sizes. In place, `send` points into `recv` where NCCL puts the input: allgather at
// recv + rank*count, every other collective at recv; and the output lands where NCCL puts it:
// reducescatter's at recv + rank*count, the others' at recv.
struct CollectiveCall {
  Collective collective = Collective::kAllReduce;
  DataType type = DataType::kFloat;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  bool in_place = false;
};

// One collective bound to its buffers and arguments, run many times by the timed loop: what a
// backend would resolve on every call (datatype, operator, peers) is resolved once, so the
// harness adds next to nothing to what it measures.
class BoundCollective {
 public:
  virtual ~BoundCollective() = default;
  [[nodiscard]] virtual absl::Status Run() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi (Open MPI v4.1.4)": for the preamble.
  virtual std::string Describe() const = 0;

  // OK when Run() can do this combination; otherwise why not, for the user.
  [[nodiscard]] virtual absl::Status Supports(Collective collective, DataType type,
                                              ReduceOp op) const = 0;
  // Runs one collective to completion on this rank.
  [[nodiscard]] virtual absl::Status Run(const CollectiveCall& call) = 0;
  // `call`, to be run many times. The default runs Run(call); a backend overrides it where
  // binding once is cheaper. The buffers must outlive the result.
  virtual std::unique_ptr<BoundCollective> Bind(const CollectiveCall& call) {
    class Unbound final : public BoundCollective {
     public:
      Unbound(Communicator& comm, const CollectiveCall& call) : comm_(comm), call_(call) {}
      [[nodiscard]] absl::Status Run() override { return comm_.Run(call_); }

     private:
      Communicator& comm_;
      const CollectiveCall call_;
    };
    return std::make_unique<Unbound>(*this, call);
  }
  [[nodiscard]] virtual absl::Status Barrier() = 0;
  // Every rank's `value` combined (kSum, kMin or kMax), on every rank: timings and error counts.
  [[nodiscard]] virtual absl::StatusOr<double> Combine(double value, ReduceOp op) = 0;
  // Every rank's `mine` (at most 256 bytes), in rank order, on every rank.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine) = 0;
};

}  // namespace pillar::bench
