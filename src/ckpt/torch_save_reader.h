// Reads the tensors of a file written by Python's torch.save (a zip archive: a pickle,
// `data.pkl`, naming storages kept as `data/<key>` entries), without LibTorch: a dict, or the
// OrderedDict a module's state_dict() is, of names to tensors. Only what such files hold is
// understood (dicts, tuples, lists, numbers, strings, storages, tensors and parameters); any
// other object in the pickle is an error naming it, never code run on its behalf — unlike
// Python's pickle, this cannot be made to execute anything.
//
//   PILLAR_ASSIGN_OR_RETURN(TorchSaveFile file, ReadTorchSave("model.pt"));
//   for (const TorchSaveTensor& t : file.tensors) { ... t.name, t.dtype, t.shape, t.data ... }
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/manifest.h"

namespace pillar::ckpt {

struct TorchSaveTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // contiguous, row-major; valid while the file is
};

struct TorchSaveFile {
  std::vector<TorchSaveTensor> tensors;  // in the dict's order
  // What the spans point into: the file's bytes, and copies of strided tensors.
  std::shared_ptr<const void> keep_alive;
};

absl::StatusOr<TorchSaveFile> ReadTorchSave(const std::string& path);
// The same over bytes in memory (the fuzzer's entry point); `bytes` must outlive the result.
absl::StatusOr<TorchSaveFile> ParseTorchSave(std::span<const std::byte> bytes);

}  // namespace pillar::ckpt
