// The parts of the torch.save reader (torch_save_reader.cc) that have files of their own: the
// memory budget every part charges, the zip directory (torch_zip.cc) and the pickle machine
// (torch_pickle.cc). Not a door into ckpt/: include torch_save_reader.h.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/torch_save_reader.h"
#include "common/strings.h"

namespace pillar::ckpt::internal {

// ---- What the reader's structures cost, as glibc's malloc hands out memory: each block has an
// 8-byte header and is rounded up to 16 bytes (32 at least). Charging these rather than the bytes
// asked for is what keeps the documented bound a bound on the process's memory.
constexpr uint64_t Allocation(uint64_t n) { return std::max<uint64_t>(32, (n + 8 + 15) / 16 * 16); }
// A std::string's own heap block: none while it fits in the object (libstdc++ keeps up to 15).
constexpr uint64_t StringHeap(uint64_t length) { return length <= 15 ? 0 : Allocation(length + 1); }
// A std::map node: the red-black tree's colour and three links, then the key and value.
template <typename Pair>
constexpr uint64_t MapNode() {
  return Allocation(4 * sizeof(void*) + sizeof(Pair));
}

// The memory the reader may use for the zip directory and the pickle machine's values, container
// slots and memo (see TorchSaveLimits). Charges are never refunded: what is freed early (a
// tensor's argument tuple) still counts, so the total charged bounds what is ever held at once.
class MemoryBudget {
 public:
  MemoryBudget(const TorchSaveLimits& limits, uint64_t file_size)
      : per_file_byte_(limits.max_pickle_bytes_per_file_byte), floor_(limits.min_pickle_bytes) {
    if (__builtin_mul_overflow(per_file_byte_, file_size, &limit_)) limit_ = UINT64_MAX;
    limit_ = std::max(limit_, floor_);
  }
  // Whether `n` more bytes fit; if so they are counted.
  [[nodiscard]] bool Charge(uint64_t n) {
    if (n > limit_ - used_) return false;
    used_ += n;
    return true;
  }
  uint64_t limit() const { return limit_; }
  // Why a charge failed, naming the limit.
  std::string Exceeded() const {
    return StrCat("would take more than ", limit_, " bytes of memory (the limit: ", per_file_byte_,
                  " times the file's size, at least ", floor_, " bytes)");
  }

 private:
  uint64_t per_file_byte_, floor_, limit_ = 0, used_ = 0;
};

// One stored entry of the zip: where its data starts in the file, and its size.
struct ZipEntry {
  uint64_t offset = 0;  // of the data
  uint64_t size = 0;
};

// The zip's directory by entry name (stored entries only, zip64 aware), each entry checked to lie
// within `bytes`; its nodes are charged to `budget`.
[[nodiscard]] absl::StatusOr<std::map<std::string, ZipEntry>> ReadZip(
    std::span<const std::byte> bytes, MemoryBudget& budget);

// ---- The pickle: a small stack machine for the opcodes torch.save emits.

struct Value;
using ValuePtr = std::shared_ptr<Value>;
// Kept small, as a pickle can make one every byte or two: strings are views of the pickle (which
// outlives every value), and what a storage or tensor needs beyond a leaf's fields is in `i` and
// `items`.
struct Value {
  enum class Kind : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kMark
  };
  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value();

  Kind kind = Kind::kNone;
  bool nested = false;  // inside a container or tensor, and so never changed again
  uint32_t depth = 1;   // levels of containers down to the deepest leaf, this one included
  int64_t i = 0;        // an int, a bool, a float's bits; a storage's DType; a tensor's offset
  std::string_view s;   // a string; a global's "module\nname"; a storage's key
  // A tuple's or list's items; a dict's keys and values alternating; a tensor's storage, size
  // tuple and stride tuple.
  std::vector<ValuePtr> items;
};

// The value the pickle `pickle` builds (its STOP's), within `limits` and `budget`.
[[nodiscard]] absl::StatusOr<ValuePtr> Unpickle(std::span<const std::byte> pickle,
                                                const TorchSaveLimits& limits,
                                                MemoryBudget& budget);

}  // namespace pillar::ckpt::internal
