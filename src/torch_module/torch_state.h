// LibTorch tensors in and out of checkpoints, and PyTorch `state_dict` files (what Python's
// torch.save writes and torch.load reads) in and out of the checkpoint format. The only part of
// src/ckpt that includes LibTorch; trainers written against LibTorch use it.
//
//   std::vector<Source> sources;
//   for (const auto& p : model->named_parameters()) sources.push_back(*TensorSource(p.key(),
//   p.value())); manager->Save(step, sources);
//   ...
//   PILLAR_ASSIGN_OR_RETURN(torch::Tensor w, LoadTensor(checkpoint, "fc1.weight"));
#pragma once

#include <torch/torch.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_manager.h"

namespace pillar::ckpt {

[[nodiscard]] absl::StatusOr<DType> DTypeOf(c10::ScalarType type);
[[nodiscard]] absl::StatusOr<c10::ScalarType> ScalarTypeOf(DType dtype);

// A Source whose copy moves `tensor` (any device, any strides) into the staging buffer; the
// tensor must stay alive, unchanged, until Save() returns.
[[nodiscard]] absl::StatusOr<Source> TensorSource(std::string name, const torch::Tensor& tensor);

// Entry `name` as a new CPU tensor owning its memory; NotFound or InvalidArgument (a blob).
[[nodiscard]] absl::StatusOr<torch::Tensor> LoadTensor(const LoadedCheckpoint& checkpoint,
                                                       std::string_view name);

// Every tensor entry of `checkpoint` (blobs as uint8 tensors) as a dict in torch.save's format.
// (Reading such files needs no LibTorch: ckpt/torch_save_reader.h.)
[[nodiscard]] absl::Status ExportStateDict(const LoadedCheckpoint& checkpoint,
                                           const std::string& path);

}  // namespace pillar::ckpt
