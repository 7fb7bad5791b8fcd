// The flags of `pillar bench collective`: nccl-tests' own, with its meanings and defaults, and
// pillar's (backend, rendezvous, JSON, pass/fail threshold). Parsed here, not by the CLI
// framework, so `-b8`, `-b 8`, `--minbytes 8` and `--minbytes=8` all work as in nccl-tests,
// and a flag no CPU backend can honour (-g 2, -G 1, -t 2) is refused by name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/collective.h"

namespace pillar::bench {

struct CollectiveOptions {
  Collective collective = Collective::kAllReduce;
  size_t min_bytes = 32u << 20;                      // -b
  size_t max_bytes = 32u << 20;                      // -e
  size_t step_bytes = 1u << 20;                      // -i, used when the factor is 1
  size_t step_factor = 1;                            // -f
  int iters = 20;                                    // -n
  int warmup_iters = 1;                              // -w
  int agg_iters = 1;                                 // -m: collectives per timed iteration
  bool check = true;                                 // -c
  std::vector<ReduceOp> ops = {ReduceOp::kSum};      // -o (all: every one)
  std::vector<DataType> types = {DataType::kFloat};  // -d (all: every one)
  int root = 0;                                      // -r
  int average = 1;                                   // -a: 0 rank 0's time, 1 mean, 2 min, 3 max
  bool blocking = false;                             // -z: CPU backends complete every call anyway
  int cycles = 1;                                    // -N: 0 runs until stopped
  // pillar's own
  std::string backend;              // --backend mpi|gloo; empty: mpi under mpirun, else gloo
  std::string rendezvous;           // --rendezvous file:DIR | redis://HOST:PORT (gloo)
  std::string job = "pillar";       // --job: the rendezvous key prefix (gloo)
  std::string iface;                // --iface: the network interface gloo binds (default: by name)
  std::optional<int> rank;          // --rank (gloo; default from the launcher's environment)
  std::optional<int> world_size;    // --world-size (gloo)
  std::string json_path;            // --json FILE
  std::optional<double> min_busbw;  // --min-busbw, or NCCL_TESTS_MIN_BW
  bool inject_fault = false;        // --inject-fault: rank 0 corrupts one element before a check
};

// `args` excludes the program and the subcommand words, and includes the collective's name
// (the first word not a flag). `min_bw_env` is $NCCL_TESTS_MIN_BW, if set.
[[nodiscard]] absl::StatusOr<CollectiveOptions> ParseCollectiveArgs(
    const std::vector<std::string>& args, const char* min_bw_env);

// "32M" = 33554432: nccl-tests' sizes take K, M, G and T as powers of 1024 (upper or lower
// case, an optional trailing B).
[[nodiscard]] absl::StatusOr<size_t> ParseByteSize(std::string_view text);

// The usage text, in nccl-tests' terms.
std::string CollectiveUsage();

}  // namespace pillar::bench
