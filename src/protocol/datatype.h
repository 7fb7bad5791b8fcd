// The tensor element types of the Open Inference Protocol (KServe v2) that pillar serves. BYTES
// elements are byte strings of any length (text, mostly); their raw layout is in tensor.h.
//
//   absl::StatusOr<DataType> t = ParseDataType("FP32");
//   size_t bytes = ElementSize(*t);  // 4
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar::protocol {

enum class DataType {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp32,
  kFp64,
  kBytes,
};

// The protocol's spelling ("BOOL", "UINT8", ..., "FP64", "BYTES").
std::string_view DataTypeName(DataType type);
[[nodiscard]] absl::StatusOr<DataType> ParseDataType(std::string_view name);
// Bytes per element in pillar's raw tensor layout (BOOL is one byte, 0 or 1); 0 for BYTES, whose
// elements have no one size.
size_t ElementSize(DataType type);

}  // namespace pillar::protocol
