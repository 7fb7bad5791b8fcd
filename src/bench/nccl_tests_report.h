// nccl-tests' output, byte for byte in its shape: the `#` preamble, the two-placement header,
// one row per size, and the two summary lines whose sixth whitespace token health checkers
// parse (`# Avg bus bandwidth    : 431.2`). Also the same results as JSON.
#pragma once

#include <string>
#include <vector>

#include "bench/collective_options.h"
#include "bench/collective_runner.h"

namespace pillar::bench {

// One "Using devices" line's facts for a rank.
struct RankInfo {
  int rank = 0;
  int pid = 0;
  std::string host;
  std::string bus = "cpu";  // where NCCL prints the PCI bus id
  std::string device;       // "mpi: Open MPI v4.1.4"
};

std::string FormatPreamble(const CollectiveOptions& options, const std::vector<RankInfo>& ranks);
std::string FormatHeader();
std::string FormatRow(const CollectiveRow& row);
// The skipped combinations and the two summary lines (OK or FAILED against --min-busbw).
std::string FormatFooter(const CollectiveSummary& summary, const CollectiveOptions& options);
// Whether the run passes: no wrong element, and the threshold (if any) met.
bool Passed(const CollectiveSummary& summary, const CollectiveOptions& options);

std::string CollectiveJson(const CollectiveSummary& summary, const CollectiveOptions& options,
                           const std::string& backend, int ranks);

}  // namespace pillar::bench
