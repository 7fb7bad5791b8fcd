#include "ckpt/torch_save_parts.h"

namespace pillar::ckpt::internal {
namespace {

// ---- The zip container (stored entries only, zip64 aware).

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool Has(uint64_t at, uint64_t n) const { return at <= bytes_.size() && n <= bytes_.size() - at; }
  uint64_t U(uint64_t at, int n) const {  // little-endian, caller checked Has()
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | uint64_t(bytes_[at + uint64_t(i)]);
    return v;
  }
  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
};

}  // namespace

[[nodiscard]] absl::StatusOr<std::map<std::string, ZipEntry>> ReadZip(
    std::span<const std::byte> bytes, MemoryBudget& budget) {
  const Reader r(bytes);
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(StrCat("not a torch.save file: ", what));
  };
  if (bytes.size() < 22) return bad("too short for a zip archive");
  // The end-of-central-directory record, within the last 64 KiB + 22 bytes.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = bytes.size() > 65557 ? bytes.size() - 65557 : 0;
  for (uint64_t at = bytes.size() - 22;; --at) {
    if (r.U(at, 4) == 0x06054b50) {
      eocd = at;
      break;
    }
    if (at == lowest) break;
  }
  if (eocd == UINT64_MAX) return bad("no zip end record (not a zip archive, or a pre-1.6 file)");
  uint64_t count = r.U(eocd + 10, 2);
  uint64_t dir_offset = r.U(eocd + 16, 4);
  if ((count == 0xffff || dir_offset == 0xffffffff) && eocd >= 20 &&
      r.U(eocd - 20, 4) == 0x07064b50) {
    const uint64_t zip64 = r.U(eocd - 20 + 8, 8);
    if (!r.Has(zip64, 56) || r.U(zip64, 4) != 0x06064b50) return bad("broken zip64 end record");
    count = r.U(zip64 + 32, 8);
    dir_offset = r.U(zip64 + 48, 8);
  }
  std::map<std::string, ZipEntry> entries;
  uint64_t at = dir_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (!r.Has(at, 46) || r.U(at, 4) != 0x02014b50) return bad("broken central directory");
    const uint64_t method = r.U(at + 10, 2);
    uint64_t size = r.U(at + 24, 4);
    uint64_t compressed = r.U(at + 20, 4);
    const uint64_t name_len = r.U(at + 28, 2), extra_len = r.U(at + 30, 2),
                   comment_len = r.U(at + 32, 2);
    uint64_t local = r.U(at + 42, 4);
    if (!r.Has(at + 46, name_len + extra_len + comment_len)) return bad("broken directory entry");
    std::string name(reinterpret_cast<const char*>(bytes.data() + at + 46), name_len);
    // Zip64 sizes and offset, in this order, each present only where the field is saturated.
    for (uint64_t e = at + 46 + name_len; e + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = r.U(e, 2), len = r.U(e + 2, 2);
      if (e + 4 + len > at + 46 + name_len + extra_len) return bad("broken zip extra field");
      if (id == 1) {
        uint64_t f = e + 4;
        auto take = [&](uint64_t& field) {
          if (field == 0xffffffff && f + 8 <= e + 4 + len) {
            field = r.U(f, 8);
            f += 8;
          }
        };
        take(size);
        take(compressed);
        take(local);
      }
      e += 4 + len;
    }
    if (method != 0 || compressed != size) return bad(StrCat("entry ", name, " is compressed"));
    if (!r.Has(local, 30) || r.U(local, 4) != 0x04034b50) return bad("broken local header");
    const uint64_t data = local + 30 + r.U(local + 26, 2) + r.U(local + 28, 2);
    if (!r.Has(data, size)) return bad(StrCat("entry ", name, " runs past the end"));
    // Each entry takes at least 46 bytes of directory, but its node several times that.
    const uint64_t cost = MapNode<std::pair<const std::string, ZipEntry>>() + StringHeap(name_len);
    const bool inserted = entries.insert_or_assign(std::move(name), ZipEntry{data, size}).second;
    if (inserted && !budget.Charge(cost)) {
      return absl::InvalidArgumentError(
          StrCat("torch.save zip directory of ", count, " entries ", budget.Exceeded()));
    }
    at += 46 + name_len + extra_len + comment_len;
  }
  return entries;
}

}  // namespace pillar::ckpt::internal
