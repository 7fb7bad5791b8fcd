// Reads the tensors of a file written by Python's torch.save (a zip archive: a pickle,
// `data.pkl`, naming storages kept as `data/<key>` entries), without LibTorch: a dict, or the
// OrderedDict a module's state_dict() is, of names to tensors. Only what such files hold is
// understood (dicts, tuples, lists, numbers, strings, storages, tensors and parameters); any
// other object in the pickle is an error naming it, never code run on its behalf — unlike
// Python's pickle, this cannot be made to execute anything. Nor can any file make it use more
// memory than this, beyond the file's own bytes (read in place) and a few KiB of fixed state:
// max(64 MiB, 16 x the file's size) for the zip directory and the pickle machine's values,
// container slots and memo, plus twice the file's size for the result's copies, names and shapes
// (TorchSaveLimits' defaults; a 10 MB file, at most 180 MB). Nesting is bounded too, so it cannot
// overflow the stack, and every bound passed is an error naming it.
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
  // Contiguous, row-major; valid while the file is. Tensors naming the same strided view share
  // one copy, so two spans may be the same bytes.
  std::span<const std::byte> data;
};

struct TorchSaveFile {
  std::vector<TorchSaveTensor> tensors;  // in the dict's order
  // What the spans point into: the file's bytes, and copies of strided tensors.
  std::shared_ptr<const void> keep_alive;
  // The size of the bytes that were read (the mapped file's, not a second look at the path).
  uint64_t file_bytes = 0;
};

// Bounds on what a file may make the reader build. The defaults are far above anything torch.save
// writes for a state_dict; raising them is for tests.
struct TorchSaveLimits {
  // Containers within containers. A state_dict is three or four levels deep, and Python's
  // pickler recurses several frames a level under a default recursion limit of 1,000, so
  // torch.save cannot write a file nesting this deep.
  uint32_t max_nesting = 1000;
  // Values on the pickle machine's stack at once. The pickler sets a dict's items and appends a
  // list's in batches of 1,000 (2,001 stack values with the mark), plus a few a level, so a
  // state_dict never comes near; without a bound, a megabyte of EMPTY_LIST opcodes would hold a
  // million values (nearly 200 MB) before the nesting limit is reached.
  size_t max_stack = 100'000;
  // What the result holds beyond the file's own bytes (copies of strided views, tensor names and
  // shapes), per byte of the file. A strided view never holds more elements than its storage
  // (expanded views are refused) and each distinct view is copied once however many tensors
  // name it, so a file whose every storage is read transposed needs about its own size; twice
  // leaves room for names, shapes and a second view of some storages. Unbounded, a 4 MB file
  // could ask for 16 GB through 4,000 slightly different views of one 4 MiB storage.
  uint64_t max_materialised_per_file_byte = 2;
  // The memory the zip directory and the pickle machine may take, per byte of the file, and at
  // least `min_pickle_bytes`. Charged: every value (None, the booleans, ints 0 to 255 and marks
  // are made once, and a memoized value is one however often it is fetched), every slot of a
  // tuple, list or dict, of the stack and of the memo, and every zip entry, as glibc allocates
  // them; never refunded, so the total bounds what is held at once. A state_dict's pickle makes
  // about a dozen values and memo entries a tensor: 2.3 KB with its module's _metadata entry,
  // where the file spends about 150 bytes of pickle, 100 or more of zip headers and the tensor's
  // data. So 50,000 one-element tensors, each its own module (RealStateDictsFitTheBudget), need
  // 9.2 bytes a byte of file, and real state_dicts, whose size is their tensors' data, a small
  // fraction of one; 16 leaves room above that worst case. The floor decides for files under
  // 4 MiB, where the product would be less than memory no machine importing a model misses.
  // Unbounded, 10 MB of `None, append` took 1.24 GB, and ten million one-byte MEMOIZEs 794 MB.
  uint64_t max_pickle_bytes_per_file_byte = 16;
  uint64_t min_pickle_bytes = uint64_t{64} << 20;
};

[[nodiscard]] absl::StatusOr<TorchSaveFile> ReadTorchSave(const std::string& path,
                                                          const TorchSaveLimits& limits = {});
// The same over bytes in memory (the fuzzer's entry point); `bytes` must outlive the result.
[[nodiscard]] absl::StatusOr<TorchSaveFile> ParseTorchSave(std::span<const std::byte> bytes,
                                                           const TorchSaveLimits& limits = {});

}  // namespace pillar::ckpt
