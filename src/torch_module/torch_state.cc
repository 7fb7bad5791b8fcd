#include "torch_module/torch_state.h"

#include <cstring>
#include <fstream>

#include "common/strings.h"

namespace pillar::ckpt {
namespace {

constexpr std::pair<c10::ScalarType, DType> kTypes[] = {
    {c10::kFloat, DType::kFloat32}, {c10::kDouble, DType::kFloat64},
    {c10::kHalf, DType::kFloat16},  {c10::kBFloat16, DType::kBFloat16},
    {c10::kLong, DType::kInt64},    {c10::kInt, DType::kInt32},
    {c10::kShort, DType::kInt16},   {c10::kChar, DType::kInt8},
    {c10::kByte, DType::kUInt8},    {c10::kBool, DType::kBool}};

}  // namespace

[[nodiscard]] absl::StatusOr<DType> DTypeOf(c10::ScalarType type) {
  for (const auto& [t, d] : kTypes) {
    if (t == type) return d;
  }
  return absl::InvalidArgumentError(
      StrCat("tensors of type ", c10::toString(type), " cannot be checkpointed"));
}

[[nodiscard]] absl::StatusOr<c10::ScalarType> ScalarTypeOf(DType dtype) {
  for (const auto& [t, d] : kTypes) {
    if (d == dtype) return t;
  }
  return absl::InvalidArgumentError("a blob is not a tensor");
}

[[nodiscard]] absl::StatusOr<Source> TensorSource(std::string name, const torch::Tensor& tensor) {
  absl::StatusOr<DType> dtype = DTypeOf(tensor.scalar_type());
  if (!dtype.ok()) return dtype.status();
  Source source;
  source.name = std::move(name);
  source.dtype = *dtype;
  source.shape = tensor.sizes().vec();
  source.bytes = uint64_t(tensor.numel()) * uint64_t(tensor.element_size());
  source.copy = [tensor](std::span<std::byte> out) {
    // A view of the staging buffer as a CPU tensor; copy_ handles device and strides.
    torch::NoGradGuard no_grad;
    torch::from_blob(out.data(), tensor.sizes(), tensor.options().device(torch::kCPU))
        .copy_(tensor);
  };
  return source;
}

[[nodiscard]] absl::StatusOr<torch::Tensor> LoadTensor(const LoadedCheckpoint& checkpoint,
                                                       std::string_view name) {
  const EntryInfo* entry = checkpoint.Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(StrCat("the checkpoint has no entry '", name, "'"));
  }
  absl::StatusOr<c10::ScalarType> type = ScalarTypeOf(entry->dtype);
  if (!type.ok()) return absl::InvalidArgumentError(StrCat("entry '", name, "' is a blob"));
  torch::Tensor out = torch::empty(entry->shape, torch::TensorOptions().dtype(*type));
  std::span<const std::byte> data = checkpoint.Data(name);
  if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
  return out;
}

[[nodiscard]] absl::Status ExportStateDict(const LoadedCheckpoint& checkpoint,
                                           const std::string& path) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const EntryInfo& e : checkpoint.manifest().entries) {
    torch::Tensor t;
    if (e.dtype == DType::kBlob) {
      t = torch::empty({int64_t(e.bytes)}, torch::kUInt8);
      std::span<const std::byte> data = checkpoint.Data(e.name);
      if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
    } else {
      absl::StatusOr<torch::Tensor> loaded = LoadTensor(checkpoint, e.name);
      if (!loaded.ok()) return loaded.status();
      t = std::move(*loaded);
    }
    dict.insert(e.name, t);
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace pillar::ckpt
