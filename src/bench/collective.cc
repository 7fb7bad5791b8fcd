#include "bench/collective.h"

#include <algorithm>
#include <array>
#include <utility>

namespace pillar::bench {
namespace {

constexpr std::array<std::pair<Collective, std::string_view>, 7> kCollectiveNames = {{
    {Collective::kAllReduce, "allreduce"},
    {Collective::kAllGather, "allgather"},
    {Collective::kReduceScatter, "reducescatter"},
    {Collective::kBroadcast, "broadcast"},
    {Collective::kReduce, "reduce"},
    {Collective::kAllToAll, "alltoall"},
    {Collective::kSendRecv, "sendrecv"},
}};

struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<TypeInfo, 10> kTypes = {{
    {DataType::kInt8, "int8", 1},
    {DataType::kUint8, "uint8", 1},
    {DataType::kInt32, "int32", 4},
    {DataType::kUint32, "uint32", 4},
    {DataType::kInt64, "int64", 8},
    {DataType::kUint64, "uint64", 8},
    {DataType::kHalf, "half", 2},
    {DataType::kFloat, "float", 4},
    {DataType::kDouble, "double", 8},
    {DataType::kBfloat16, "bfloat16", 2},
}};

constexpr std::array<std::pair<ReduceOp, std::string_view>, 5> kOpNames = {{
    {ReduceOp::kSum, "sum"},
    {ReduceOp::kProd, "prod"},
    {ReduceOp::kMax, "max"},
    {ReduceOp::kMin, "min"},
    {ReduceOp::kAvg, "avg"},
}};

}  // namespace

std::string_view CollectiveName(Collective c) {
  for (const auto& [value, name] : kCollectiveNames) {
    if (value == c) return name;
  }
  return "?";
}

std::optional<Collective> ParseCollective(std::string_view name) {
  for (const auto& [value, n] : kCollectiveNames) {
    if (n == name) return value;
  }
  return std::nullopt;
}

std::string_view DataTypeName(DataType t) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == t) return info.name;
  }
  return "?";
}

std::optional<DataType> ParseDataType(std::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.name == name) return info.type;
  }
  // nccl-tests' aliases.
  if (name == "char") return DataType::kInt8;
  if (name == "int") return DataType::kInt32;
  if (name == "fp16") return DataType::kHalf;
  if (name == "fp32") return DataType::kFloat;
  if (name == "fp64") return DataType::kDouble;
  if (name == "bf16") return DataType::kBfloat16;
  return std::nullopt;
}

size_t DataTypeSize(DataType t) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == t) return info.size;
  }
  return 1;
}

bool IsFloating(DataType t) {
  return t == DataType::kHalf || t == DataType::kFloat || t == DataType::kDouble ||
         t == DataType::kBfloat16;
}

std::string_view ReduceOpName(ReduceOp op) {
  for (const auto& [value, name] : kOpNames) {
    if (value == op) return name;
  }
  return "?";
}

std::optional<ReduceOp> ParseReduceOp(std::string_view name) {
  for (const auto& [value, n] : kOpNames) {
    if (n == name) return value;
  }
  return std::nullopt;
}

bool Reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

bool HasRoot(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

Counts CollectiveCounts(Collective c, size_t bytes, DataType type, int ranks, int rank) {
  const size_t n = size_t(ranks);
  const size_t elements = bytes / DataTypeSize(type);
  Counts counts;
  switch (c) {
    case Collective::kAllGather:
      counts.count = elements / n;
      counts.send = counts.count;
      counts.recv = counts.count * n;
      counts.in_place_offset = counts.count * size_t(rank);
      break;
    case Collective::kReduceScatter:
      counts.count = elements / n;
      counts.send = counts.count * n;
      counts.recv = counts.count * n;  // in place, the input fills the receive buffer
      counts.in_place_offset = 0;
      break;
    case Collective::kAllToAll:
      counts.count = elements / n;
      counts.send = counts.count * n;
      counts.recv = counts.count * n;
      break;
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      counts.count = elements;
      counts.send = elements;
      counts.recv = elements;
      break;
  }
  const size_t out = c == Collective::kReduceScatter ? counts.count : counts.recv;
  counts.printed_bytes = std::max(counts.send, out) * DataTypeSize(type);
  return counts;
}

Bandwidth CollectiveBandwidth(Collective c, size_t count, DataType type, int ranks,
                              double seconds) {
  const double n = ranks;
  double bytes = double(count) * double(DataTypeSize(type));
  double factor = 1;
  switch (c) {
    case Collective::kAllReduce:
      factor = 2 * (n - 1) / n;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      bytes *= n;  // `count` is per rank (per peer)
      factor = (n - 1) / n;
      break;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      break;
  }
  Bandwidth bw;
  if (seconds > 0) bw.algbw = bytes / 1e9 / seconds;
  bw.busbw = bw.algbw * factor;
  return bw;
}

}  // namespace pillar::bench
