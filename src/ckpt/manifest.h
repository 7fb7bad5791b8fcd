// What a checkpoint holds, as its MANIFEST records it: the step, user metadata, the shard files
// with their sizes and checksums, and every entry (a tensor or a blob) with its dtype, shape,
// place and checksum. Encode() and Parse() are inverse; Parse() checks every field and every
// cross-reference (an entry inside its shard, shapes matching sizes) and names what is wrong.
//
//   Manifest m;  m.step = 1200;  m.entries.push_back({...});
//   std::string text = m.Encode();
//   PILLAR_ASSIGN_OR_RETURN(Manifest back, Manifest::Parse(text, "run/step-00001200/MANIFEST"));
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar::ckpt {

// Element types of tensor entries; kBlob marks an opaque byte buffer.
enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
  kBlob
};
std::string_view DTypeName(DType dtype);
std::optional<DType> ParseDType(std::string_view name);
// Bytes per element; 1 for kBlob.
size_t DTypeSize(DType dtype);

// "shard-00003.bin".
std::string ShardFileName(size_t index);

// The rules an entry's name (and a metadata key) and shape obey, for the writer and the reader
// alike, so nothing is written that a load would refuse: 1 to 1024 bytes without NUL; at most
// 16 dimensions, none negative, whose product times 16 fits in 64 bits. ShapeElements() is the
// element count, or none when the shape breaks the rules.
bool ValidEntryName(std::string_view name);
std::optional<uint64_t> ShapeElements(std::span<const int64_t> shape);

struct ShardInfo {
  std::string file;  // "shard-00000.bin"
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the whole file
};

struct EntryInfo {
  std::string name;
  DType dtype = DType::kBlob;
  std::vector<int64_t> shape;  // empty for a blob (and for a scalar tensor)
  uint32_t shard = 0;
  uint64_t offset = 0;  // in the shard, a multiple of format::kEntryAlignment
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the entry's bytes
};

struct Manifest {
  int64_t step = 0;
  int64_t created_us = 0;       // Unix microseconds
  double save_seconds = 0;      // how long the write took (the Young/Daly cost estimate)
  double snapshot_seconds = 0;  // how long the training loop was stalled for it
  std::map<std::string, std::string> metadata;
  std::vector<ShardInfo> shards;
  std::vector<EntryInfo> entries;

  uint64_t TotalBytes() const;
  // The MANIFEST file's text: the JSON line, then its checksum line.
  std::string Encode() const;
  // `source` names the file in errors.
  [[nodiscard]] static absl::StatusOr<Manifest> Parse(std::string_view text,
                                                      std::string_view source);
};

}  // namespace pillar::ckpt
