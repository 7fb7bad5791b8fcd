#include "ckpt/torch_save_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "ckpt/torch_save_parts.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::ckpt {
namespace {

using internal::Allocation;
using internal::MapNode;
using internal::MemoryBudget;
using internal::StringHeap;
using internal::Value;
using internal::ValuePtr;
using internal::ZipEntry;

std::vector<int64_t> Ints(const Value& shape) {
  std::vector<int64_t> out;
  out.reserve(shape.items.size());
  for (const ValuePtr& d : shape.items) out.push_back(d->i);
  return out;
}

// A tensor's name for an error message: a hostile one may be megabytes long.
std::string Shortened(std::string_view name) {
  constexpr size_t kShown = 100;
  if (name.size() <= kShown) return std::string(name);
  return StrCat(name.substr(0, kShown), "... (", name.size(), " bytes)");
}

bool Contiguous(const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  int64_t expected = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != expected) return false;
    expected *= size[d];
  }
  return true;
}

// The zip's data.pkl, and in `prefix` the folder it is in (its storages are in prefix/data/);
// null when there is none.
const ZipEntry* FindPickle(const std::map<std::string, ZipEntry>& zip, std::string& prefix) {
  for (const auto& [name, entry] : zip) {
    const std::string_view n = name;
    if (n.size() >= 8 && n.substr(n.size() - 8) == "data.pkl") {
      prefix = name.substr(0, name.size() - 8);
      return &entry;
    }
  }
  return nullptr;
}

// The elements of the view of `size` and `stride` from element `offset` of a storage of
// `storage_elements`. Every product and sum checked: sizes, strides and the offset come from
// the file.
[[nodiscard]] absl::StatusOr<uint64_t> ViewElements(std::string_view name,
                                                    const std::vector<int64_t>& size,
                                                    const std::vector<int64_t>& stride,
                                                    uint64_t offset, uint64_t storage_elements) {
  uint64_t numel = 1;
  uint64_t last = offset;  // the highest element index the view touches
  bool overflow = false;
  for (size_t d = 0; d < size.size(); ++d) {
    const uint64_t n = uint64_t(size[d]);
    overflow |= __builtin_mul_overflow(numel, n, &numel);
    uint64_t reach = 0;
    if (n > 0) overflow |= __builtin_mul_overflow(n - 1, uint64_t(stride[d]), &reach);
    overflow |= __builtin_add_overflow(last, reach, &last);
  }
  if (overflow) {
    return absl::InvalidArgumentError(StrCat("tensor '", Shortened(name), "': size too large"));
  }
  // More elements than the storage holds would be an expanded (stride 0) view: its copy could
  // be any size, so it is refused rather than materialised.
  if (numel > 0 && (last >= storage_elements || numel > storage_elements)) {
    return absl::InvalidArgumentError(StrCat("tensor '", Shortened(name),
                                             "' reaches past its storage, or is an expanded "
                                             "view (not supported)"));
  }
  return numel;
}

// Copies the `numel` elements of `element` bytes of a strided view from element `offset` of
// `base` into `out`, in row-major order.
void GatherStrided(const std::byte* base, uint64_t offset, const std::vector<int64_t>& size,
                   const std::vector<int64_t>& stride, uint64_t element, uint64_t numel,
                   std::byte* out) {
  std::vector<int64_t> index(size.size(), 0);
  for (uint64_t n = 0; n < numel; ++n) {
    uint64_t at = offset;
    for (size_t d = 0; d < index.size(); ++d) {
      at += uint64_t(index[d]) * uint64_t(stride[d]);
    }
    std::memcpy(out + n * element, base + at * element, element);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
}

// Makes the result's tensors from the pickle's: each checked against its storage, a contiguous
// one pointing into the file, a strided view copied. Every byte the result holds beyond the
// file's counts against one cap (see TorchSaveLimits), checked before it is allocated.
class Materialiser {
 public:
  Materialiser(std::span<const std::byte> bytes, const std::map<std::string, ZipEntry>& zip,
               std::string_view prefix, const TorchSaveLimits& limits)
      : bytes_(bytes),
        zip_(zip),
        prefix_(prefix),
        per_file_byte_(limits.max_materialised_per_file_byte) {
    if (__builtin_mul_overflow(per_file_byte_, uint64_t(bytes.size()), &cap_)) cap_ = UINT64_MAX;
  }

  // Counts `n` more bytes of the result, or says they are over the cap. `name` is the tensor
  // they are for, or null for all of them.
  [[nodiscard]] absl::Status Charge(uint64_t n, const std::string_view* name) {
    if (n <= cap_ - materialised_) {
      materialised_ += n;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        StrCat(name == nullptr ? "" : StrCat("tensor '", Shortened(*name), "': "),
               "the tensors' copies, names and shapes would take more than ", cap_, " bytes, ",
               per_file_byte_, " times the file's size (the limit)"));
  }

  // The tensor `name`, from its _rebuild_tensor_v2 value `t`.
  [[nodiscard]] absl::StatusOr<TorchSaveTensor> Tensor(std::string_view name, const Value& t) {
    const Value& storage_value = *t.items[0];
    const std::vector<int64_t> size = Ints(*t.items[1]), stride = Ints(*t.items[2]);
    const DType dtype = DType(storage_value.i);
    auto storage = zip_.find(StrCat(prefix_, "data/", storage_value.s));
    if (storage == zip_.end()) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", Shortened(name), "': its storage is missing"));
    }
    const uint64_t element = DTypeSize(dtype);
    PILLAR_ASSIGN_OR_RETURN(const uint64_t numel, ViewElements(name, size, stride, uint64_t(t.i),
                                                               storage->second.size / element));
    // The name and shape are copied into the result: a memoized name or tensor costs the pickle
    // two bytes per reference, so they are charged like the data.
    const uint64_t shape_bytes = size.empty() ? 0 : Allocation(size.size() * sizeof(int64_t));
    PILLAR_RETURN_IF_ERROR(Charge(StringHeap(name.size()) + shape_bytes, &name));
    const std::byte* base = bytes_.data() + storage->second.offset;
    TorchSaveTensor out{std::string(name), dtype, size, {}};
    if (numel == 0) {
      out.data = {};
    } else if (Contiguous(size, stride)) {
      out.data = std::span(base + uint64_t(t.i) * element, numel * element);
    } else {
      // A strided view (a transposed weight): gather it into row-major order, once.
      PILLAR_ASSIGN_OR_RETURN(
          out.data, Gathered(name, ViewKey{storage_value.s, dtype, t.i, size, stride}, numel,
                             shape_bytes, base));
    }
    return out;
  }

  // The copies the tensors' spans may point into.
  std::shared_ptr<const void> copies() const { return copies_; }

 private:
  // A strided view: storage key, dtype, offset, size and stride.
  using ViewKey =
      std::tuple<std::string_view, DType, int64_t, std::vector<int64_t>, std::vector<int64_t>>;

  // The row-major copy of the view `key` (of `numel` elements in the storage at `base`). A view
  // is copied once, however many tensors name it: tied weights and hostile files alike may
  // refer to one view many times, and the tensors can share the copy's bytes.
  [[nodiscard]] absl::StatusOr<std::span<const std::byte>> Gathered(std::string_view name,
                                                                    ViewKey key, uint64_t numel,
                                                                    uint64_t shape_bytes,
                                                                    const std::byte* base) {
    auto seen = gathered_.find(key);
    if (seen != gathered_.end()) return seen->second;
    const auto& [storage, dtype, offset, size, stride] = key;
    const uint64_t element = DTypeSize(dtype);
    // The copy, its slot among the copies (a vector that doubles, so up to three slots while
    // it moves), and its entry in `gathered_` with the key's own size and stride.
    const uint64_t cost = Allocation(numel * element) + 3 * sizeof(std::vector<std::byte>) +
                          MapNode<std::pair<const ViewKey, std::span<const std::byte>>>() +
                          2 * shape_bytes;
    PILLAR_RETURN_IF_ERROR(Charge(cost, &name));
    std::vector<std::byte>& copy = copies_->emplace_back(numel * element);
    GatherStrided(base, uint64_t(offset), size, stride, element, numel, copy.data());
    const std::span<const std::byte> data = copy;
    gathered_.emplace(std::move(key), data);
    return data;
  }

  const std::span<const std::byte> bytes_;
  const std::map<std::string, ZipEntry>& zip_;
  const std::string_view prefix_;
  const uint64_t per_file_byte_;
  uint64_t cap_ = 0;
  uint64_t materialised_ = 0;
  std::map<ViewKey, std::span<const std::byte>> gathered_;
  std::shared_ptr<std::vector<std::vector<std::byte>>> copies_ =
      std::make_shared<std::vector<std::vector<std::byte>>>();
};

}  // namespace

[[nodiscard]] absl::StatusOr<TorchSaveFile> ParseTorchSave(std::span<const std::byte> bytes,
                                                           const TorchSaveLimits& limits) {
  MemoryBudget budget(limits, bytes.size());
  absl::StatusOr<std::map<std::string, ZipEntry>> zip = internal::ReadZip(bytes, budget);
  if (!zip.ok()) return zip.status();
  std::string prefix;
  const ZipEntry* pickle = FindPickle(*zip, prefix);
  if (pickle == nullptr) return absl::InvalidArgumentError("not a torch.save file: no data.pkl");
  absl::StatusOr<ValuePtr> root =
      internal::Unpickle(bytes.subspan(pickle->offset, pickle->size), limits, budget);
  if (!root.ok()) return root.status();
  if ((*root)->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError("the file holds no dict of tensors (a state_dict)");
  }
  TorchSaveFile file;
  file.file_bytes = bytes.size();
  Materialiser materialiser(bytes, *zip, prefix, limits);
  const std::vector<ValuePtr>& items = (*root)->items;
  // The tensors' records, in one block: growing it one at a time would hold the old and new
  // blocks at once.
  PILLAR_RETURN_IF_ERROR(
      materialiser.Charge(Allocation(items.size() / 2 * sizeof(TorchSaveTensor)), nullptr));
  file.tensors.reserve(items.size() / 2);
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind != Value::Kind::kString || items[i + 1]->kind != Value::Kind::kTensor) {
      return absl::InvalidArgumentError("every key must be a string and every value a tensor");
    }
    PILLAR_ASSIGN_OR_RETURN(TorchSaveTensor tensor,
                            materialiser.Tensor(items[i]->s, *items[i + 1]));
    file.tensors.push_back(std::move(tensor));
  }
  file.keep_alive = materialiser.copies();
  return file;
}

[[nodiscard]] absl::StatusOr<TorchSaveFile> ReadTorchSave(const std::string& path,
                                                          const TorchSaveLimits& limits) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = Env::Default()->MapFile(path);
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<MappedFile> shared = std::move(*mapped);
  absl::StatusOr<TorchSaveFile> file = ParseTorchSave(shared->data(), limits);
  if (!file.ok()) {
    return absl::Status(file.status().code(), StrCat(path, ": ", file.status().message()));
  }
  auto both = std::make_shared<std::pair<std::shared_ptr<MappedFile>, std::shared_ptr<const void>>>(
      shared, file->keep_alive);
  file->keep_alive = both;
  return file;
}

}  // namespace pillar::ckpt
