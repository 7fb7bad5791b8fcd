// The collectives `pillar bench collective` measures, their element types and reductions, and
// the byte-count and bandwidth conventions of NVIDIA's nccl-tests, which health checkers parse
// and whose numbers operators compare across clusters (docs/cluster-validation.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pillar::bench {

enum class Collective {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv
};
inline constexpr Collective kAllCollectives[] = {Collective::kAllReduce,     Collective::kAllGather,
                                                 Collective::kReduceScatter, Collective::kBroadcast,
                                                 Collective::kReduce,        Collective::kAllToAll,
                                                 Collective::kSendRecv};

enum class DataType {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kHalf,
  kFloat,
  kDouble,
  kBfloat16
};
inline constexpr DataType kAllDataTypes[] = {
    DataType::kInt8,   DataType::kUint8, DataType::kInt32, DataType::kUint32, DataType::kInt64,
    DataType::kUint64, DataType::kHalf,  DataType::kFloat, DataType::kDouble, DataType::kBfloat16};

enum class ReduceOp { kSum, kProd, kMax, kMin, kAvg };
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                             ReduceOp::kMin, ReduceOp::kAvg};

// "allreduce"; nccl-tests' binary for it is all_reduce_perf.
std::string_view CollectiveName(Collective c);
std::optional<Collective> ParseCollective(std::string_view name);
// nccl-tests' names: "int8", "uint8", "int32", …, "half", "float", "double", "bfloat16".
std::string_view DataTypeName(DataType t);
std::optional<DataType> ParseDataType(std::string_view name);
size_t DataTypeSize(DataType t);
bool IsFloating(DataType t);
std::string_view ReduceOpName(ReduceOp op);
std::optional<ReduceOp> ParseReduceOp(std::string_view name);

bool Reduces(Collective c);  // takes a reduction operator
bool HasRoot(Collective c);  // broadcast and reduce

// Element counts for one row of size `bytes`, as nccl-tests computes them: `count` is the
// column it prints (elements per rank for allgather and reducescatter, per peer for alltoall),
// send/recv the buffer sizes, and the in-place input's offset into the receive buffer.
struct Counts {
  size_t count = 0;
  size_t send = 0;
  size_t recv = 0;
  size_t in_place_offset = 0;  // elements into recv where the in-place input starts, rank 0
  size_t printed_bytes = 0;    // the size column: the larger of the two buffers
};
Counts CollectiveCounts(Collective c, size_t bytes, DataType type, int ranks, int rank);

// Algorithm bandwidth (bytes moved per rank / seconds, 1e9 bytes per GB) and bus bandwidth
// (algbw times the collective's factor: allreduce 2(n-1)/n; reducescatter, allgather, alltoall
// (n-1)/n; broadcast, reduce, sendrecv 1), in GB/s.
struct Bandwidth {
  double algbw = 0;
  double busbw = 0;
};
Bandwidth CollectiveBandwidth(Collective c, size_t count, DataType type, int ranks, double seconds);

}  // namespace pillar::bench
