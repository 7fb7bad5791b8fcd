// The on-disk contract of a checkpoint (docs/formats/checkpoint.md is the grammar). Every
// constant a writer or reader needs is here, so the two cannot drift apart.
//
//   <run>/latest                     "step-00001234\n": the newest complete checkpoint
//   <run>/step-00001234/MANIFEST     line 1: the manifest (JSON);
//                                    line 2: "xxh3:" + 16 hex digits of line 1's hash
//   <run>/step-00001234/shard-00000.bin ...   entries' bytes, each at a 64-byte aligned offset
//   <run>/step-00001235.tmp/         a checkpoint being written; never read, removed at start
//   <run>/.lock                      held (flock) by the one process changing the run
//   <run>/step-00001236.broken-<s>   a checkpoint that did not load, set aside by a trainer
//                                    (`-<n>` added for a second one in the same second)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pillar::ckpt::format {

inline constexpr std::string_view kFormatName = "pillar-checkpoint-v1";
inline constexpr std::string_view kManifestFile = "MANIFEST";
inline constexpr std::string_view kManifestChecksumPrefix = "xxh3:";
inline constexpr std::string_view kLatestFile = "latest";
inline constexpr std::string_view kStepPrefix = "step-";
inline constexpr int kStepDigits = 8;  // step-00001234; longer numbers keep all their digits
inline constexpr std::string_view kTmpSuffix = ".tmp";
inline constexpr std::string_view kLockFile = ".lock";
inline constexpr std::string_view kBrokenSuffix = ".broken-";
inline constexpr std::string_view kShardPrefix = "shard-";
inline constexpr std::string_view kShardSuffix = ".bin";
inline constexpr int kShardDigits = 5;

// Entries start at multiples of this in their shard: aligned for any dtype and for vector loads.
inline constexpr uint64_t kEntryAlignment = 64;
inline constexpr uint64_t AlignEntryOffset(uint64_t offset) {
  return (offset + kEntryAlignment - 1) / kEntryAlignment * kEntryAlignment;
}
// A manifest larger than this is refused before parsing (a million entries fit).
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
// Names of entries and metadata keys: 1 to 1024 bytes of UTF-8 without NUL.
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr int kMaxRank = 16;

}  // namespace pillar::ckpt::format
