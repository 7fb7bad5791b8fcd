#include "bench/collective_runner.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <new>

#include "bench/elements.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The reductions to sweep: those asked for, or none for a collective that does not reduce.
std::vector<std::optional<ReduceOp>> OpsToSweep(const CollectiveOptions& options) {
  std::vector<std::optional<ReduceOp>> ops;
  if (Reduces(options.collective)) {
    ops.assign(options.ops.begin(), options.ops.end());
  } else {
    ops.push_back(std::nullopt);
  }
  return ops;
}

// Both buffers at the largest size. resize() zero-fills: the pages are touched before timing, so
// faults are not the network's.
[[nodiscard]] absl::Status AllocateBuffers(size_t bytes, std::vector<std::byte>& send,
                                           std::vector<std::byte>& recv) {
  try {
    send.resize(bytes);
    recv.resize(bytes);
  } catch (const std::bad_alloc&) {  // a ulimit below the physical memory
    return absl::ResourceExhaustedError(StrCat("cannot allocate two buffers of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// A row's columns before its two placements are measured.
CollectiveRow RowFor(const CollectiveOptions& options, DataType type,
                     const std::optional<ReduceOp>& op, const Counts& counts) {
  CollectiveRow row;
  row.bytes = counts.printed_bytes;
  row.count = counts.count;
  row.type = type;
  row.op = op;
  row.root = HasRoot(options.collective) ? options.root : -1;
  return row;
}

// The out-of-place call of a row: from `send` into `recv`.
CollectiveCall OutOfPlaceCall(const CollectiveOptions& options, DataType type,
                              const std::optional<ReduceOp>& op, const Counts& counts,
                              std::vector<std::byte>& send, std::vector<std::byte>& recv) {
  CollectiveCall call;
  call.collective = options.collective;
  call.type = type;
  call.op = op.value_or(ReduceOp::kSum);
  call.root = HasRoot(options.collective) ? options.root : 0;
  call.count = counts.count;
  call.send = send.data();
  call.recv = recv.data();
  return call;
}

}  // namespace

[[nodiscard]] absl::Status CheckFitsInMemory(const CollectiveOptions& options) {
  // Two buffers of the largest size on every rank: refused with the reason when this machine
  // cannot hold them even once, rather than left to the allocator or the OOM killer.
  const uint64_t memory = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  if (options.max_bytes > memory / 2) {
    return absl::ResourceExhaustedError(StrCat("-e ", options.max_bytes,
                                               " needs twice that in host memory (send and receive "
                                               "buffers) on every rank; this machine has ",
                                               memory, " bytes"));
  }
  return absl::OkStatus();
}

std::vector<size_t> CollectiveRunner::Sizes(const CollectiveOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.min_bytes; size <= o.max_bytes;) {
    sizes.push_back(size);
    const size_t next = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes;
    if (next <= size) break;  // 0 * factor, or an overflow
    size = next;
  }
  return sizes;
}

absl::StatusOr<Placement> CollectiveRunner::Measure(CollectiveCall call, size_t send_elements,
                                                    size_t recv_elements) {
  const int rank = comm_.rank(), ranks = comm_.size();
  const size_t width = DataTypeSize(call.type);
  // Timed and checked through the same bound call.
  const std::unique_ptr<BoundCollective> bound = comm_.Bind(call);
  auto run = [&bound]() { return bound->Run(); };
  for (int i = 0; i < options_.warmup_iters; ++i) {
    if (absl::Status s = run(); !s.ok()) return s;
  }
  if (absl::Status s = comm_.Barrier(); !s.ok()) return s;
  const auto start = Clock::now();
  for (int i = 0; i < options_.iters; ++i) {
    for (int j = 0; j < options_.agg_iters; ++j) {
      if (absl::Status s = run(); !s.ok()) return s;
    }
  }
  const double mine = std::chrono::duration<double>(Clock::now() - start).count() /
                      (double(options_.iters) * double(options_.agg_iters));
  absl::StatusOr<double> seconds;
  switch (options_.average) {
    case 0:
      seconds = comm_.Combine(rank == 0 ? mine : 0, ReduceOp::kSum);
      break;
    case 2:
      seconds = comm_.Combine(mine, ReduceOp::kMin);
      break;
    case 3:
      seconds = comm_.Combine(mine, ReduceOp::kMax);
      break;
    default:
      seconds = comm_.Combine(mine, ReduceOp::kSum);
      if (seconds.ok()) *seconds /= ranks;
  }
  if (!seconds.ok()) return seconds.status();
  Placement p;
  p.seconds = *seconds;
  p.bandwidth = CollectiveBandwidth(call.collective, call.count, call.type, ranks, *seconds);
  if (!options_.check) return p;

  // Known inputs; the output filled with a value no correct result has at every index.
  std::byte* recv = static_cast<std::byte*>(call.recv);
  std::memset(recv, 0xA5, recv_elements * width);
  if (call.in_place) {
    void* input = const_cast<void*>(call.send);
    const size_t n = call.collective == Collective::kAllGather ? call.count : recv_elements;
    FillInput(call.collective, call.type, call.op, rank, ranks, input, n);
  } else {
    FillInput(call.collective, call.type, call.op, rank, ranks, const_cast<void*>(call.send),
              send_elements);
  }
  if (absl::Status s = run(); !s.ok()) return s;
  void* output = recv;
  if (call.in_place && call.collective == Collective::kReduceScatter) {
    output = recv + size_t(rank) * call.count * width;
  }
  if (options_.inject_fault && rank == 0) {
    CorruptFirstChecked(call.collective, call.type, rank, call.root, output, call.count);
  }
  const uint64_t wrong =
      CountWrong(call.collective, call.type, call.op, rank, ranks, call.root, output, call.count);
  absl::StatusOr<double> total = comm_.Combine(double(wrong), ReduceOp::kSum);
  if (!total.ok()) return total.status();
  p.wrong = uint64_t(*total);
  return p;
}

absl::StatusOr<CollectiveSummary> CollectiveRunner::Run(
    const std::function<void(const CollectiveRow&)>& on_row) {
  const Collective c = options_.collective;
  const int rank = comm_.rank(), ranks = comm_.size();
  if (HasRoot(c) && options_.root >= ranks) {
    return absl::InvalidArgumentError(
        StrCat("-r ", options_.root, ": there are only ", ranks, " ranks"));
  }
  const std::vector<std::optional<ReduceOp>> ops = OpsToSweep(options_);
  const bool one_combination = options_.types.size() == 1 && ops.size() == 1;
  const std::vector<size_t> sizes = Sizes(options_);
  CollectiveSummary summary;
  double busbw_sum = 0;
  size_t busbw_n = 0;
  size_t rows_run = 0;
  PILLAR_RETURN_IF_ERROR(CheckFitsInMemory(options_));
  PILLAR_RETURN_IF_ERROR(AllocateBuffers(options_.max_bytes, send_, recv_));
  for (int cycle = 0; options_.cycles == 0 || cycle < options_.cycles; ++cycle) {
    for (DataType type : options_.types) {
      for (const std::optional<ReduceOp>& op : ops) {
        if (absl::Status s = comm_.Supports(c, type, op.value_or(ReduceOp::kSum)); !s.ok()) {
          if (one_combination) return s;
          if (cycle == 0) {
            summary.skipped.push_back(StrCat(DataTypeName(type), " ",
                                             op ? ReduceOpName(*op) : "none", ": ", s.message()));
          }
          continue;
        }
        for (size_t bytes : sizes) {
          const Counts counts = CollectiveCounts(c, bytes, type, ranks, rank);
          CollectiveRow row = RowFor(options_, type, op, counts);
          CollectiveCall call = OutOfPlaceCall(options_, type, op, counts, send_, recv_);
          PILLAR_ASSIGN_OR_RETURN(row.out_of_place, Measure(call, counts.send, counts.recv));
          call.in_place = true;
          call.send = recv_.data() + counts.in_place_offset * DataTypeSize(type);
          PILLAR_ASSIGN_OR_RETURN(row.in_place, Measure(call, counts.send, counts.recv));
          for (const Placement* p : {&row.out_of_place, &row.in_place}) {
            busbw_sum += p->bandwidth.busbw;
            ++busbw_n;
            summary.wrong += p->wrong.value_or(0);
          }
          on_row(row);
          ++rows_run;
          // A run without end (-N 0) prints its rows and keeps none: its memory stays flat.
          if (options_.cycles != 0) summary.rows.push_back(row);
        }
      }
    }
  }
  if (rows_run == 0) {
    return absl::InvalidArgumentError(
        StrCat("this backend can run none of the combinations asked for (",
               summary.skipped.empty() ? "no sizes" : summary.skipped.front(), ")"));
  }
  summary.avg_busbw = busbw_n == 0 ? 0 : busbw_sum / double(busbw_n);
  return summary;
}

}  // namespace pillar::bench
