#include "protocol/datatype.h"

#include <array>
#include <string>

#include "common/strings.h"

namespace pillar::protocol {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<TypeInfo, 12> kTypes = {{
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2},
    {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
    {DataType::kBytes, "BYTES", 0},
}};

}  // namespace

std::string_view DataTypeName(DataType type) { return kTypes[static_cast<size_t>(type)].name; }

size_t ElementSize(DataType type) { return kTypes[static_cast<size_t>(type)].size; }

[[nodiscard]] absl::StatusOr<DataType> ParseDataType(std::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.name == name) return info.type;
  }
  if (name == "FP16" || name == "BF16") {
    return absl::InvalidArgumentError(StrCat("datatype ", name, " is not supported"));
  }
  return absl::InvalidArgumentError(StrCat("unknown datatype '", name, "'"));
}

}  // namespace pillar::protocol
