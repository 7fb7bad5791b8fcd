// Fuzzes the checkpoint MANIFEST reader and the verified load behind it: a checkpoint directory
// is whatever the disk (or a half-finished copy from another tier) holds. The input becomes the
// MANIFEST of a directory with one real 4 KiB shard; nothing may crash, and a manifest that
// parses must encode to a text that parses to the same manifest.
#include <cstdint>
#include <fstream>
#include <string>

#include "ckpt/checkpoint_format.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/manifest.h"
#include "fuzz_temp_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pillar::fuzz::TempDir dir("ckpt");
  static const bool shard_written = [] {
    std::ofstream out(dir.path / "shard-00000.bin", std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(char(i * 7));
    return true;
  }();
  (void)shard_written;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto manifest = pillar::ckpt::Manifest::Parse(text, "MANIFEST");
  if (manifest.ok()) {
    auto again = pillar::ckpt::Manifest::Parse(manifest->Encode(), "MANIFEST");
    if (!again.ok() || again->step != manifest->step ||
        again->entries.size() != manifest->entries.size() ||
        again->shards.size() != manifest->shards.size() || again->metadata != manifest->metadata) {
      __builtin_trap();
    }
  }
  {
    std::ofstream out(dir.path / std::string(pillar::ckpt::format::kManifestFile),
                      std::ios::binary | std::ios::trunc);
    out.write(text.data(), std::streamsize(text.size()));
  }
  auto loaded = pillar::ckpt::LoadCheckpoint(*pillar::Env::Default(), dir.path.string(), 1);
  if (loaded.ok()) {
    for (const auto& e : loaded->manifest().entries) {
      if (loaded->Data(e.name).size() != e.bytes) __builtin_trap();
    }
  }
  return 0;
}
