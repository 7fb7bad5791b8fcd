// Writing and reading one checkpoint directory (checkpoint_format.h). WriteCheckpoint is the
// commit protocol: every shard and the MANIFEST are written into `<dir>.tmp`, each file is
// fsynced, the directory is renamed to `<dir>` and its parent fsynced — a checkpoint is either
// complete at its final name or absent. Reading checks every checksum before returning a byte.
//
//   std::vector<EntryView> entries = {{"fc1.weight", DType::kFloat32, {128, 64}, bytes}};
//   PILLAR_ASSIGN_OR_RETURN(Manifest m, WriteCheckpoint(env, "run/step-00000100", 100, entries, {},
//   {})); PILLAR_ASSIGN_OR_RETURN(LoadedCheckpoint c, LoadCheckpoint(env, "run/step-00000100", 4));
//   std::span<const std::byte> w = c.Data("fc1.weight");
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ckpt/manifest.h"
#include "common/env.h"

namespace pillar::ckpt {

struct EntryView {
  std::string name;
  DType dtype = DType::kBlob;
  std::vector<int64_t> shape;  // empty for a blob
  std::span<const std::byte> data;
};

struct WriteOptions {
  uint64_t shard_bytes = 1ull << 30;  // a shard holds entries up to this size (one may exceed it)
  int threads = 4;                    // shards written at once
  double snapshot_seconds = 0;        // recorded in the manifest
};

// Writes the checkpoint; `dir` must not exist (an existing `<dir>.tmp` is replaced).
[[nodiscard]] absl::StatusOr<Manifest> WriteCheckpoint(
    Env& env, const std::string& dir, int64_t step, std::span<const EntryView> entries,
    const std::map<std::string, std::string>& metadata, const WriteOptions& options);

[[nodiscard]] absl::StatusOr<Manifest> ReadManifest(Env& env, const std::string& dir);

// Reads every shard and checks its size and checksum and every entry's checksum, without
// keeping the data. `threads` shards at once.
[[nodiscard]] absl::Status VerifyCheckpoint(Env& env, const std::string& dir,
                                            const Manifest& manifest, int threads = 4);

class LoadedCheckpoint {
 public:
  const Manifest& manifest() const { return manifest_; }
  // The bytes of entry `name`; empty when there is none.
  std::span<const std::byte> Data(std::string_view name) const;
  const EntryInfo* Find(std::string_view name) const;

 private:
  friend absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(Env&, const std::string&, int);
  Manifest manifest_;
  std::vector<std::unique_ptr<MappedFile>> shards_;
  // Entries by name, into manifest_.entries (whose elements stay put when this is moved): an
  // export finds each of a million entries without a scan (review helper-121: quadratic).
  absl::flat_hash_map<std::string_view, const EntryInfo*> by_name_;
};

// Maps and verifies the whole checkpoint (its entries' bytes are the page cache's; the files
// must not be changed while it is loaded, which the commit protocol never does).
[[nodiscard]] absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(Env& env, const std::string& dir,
                                                              int threads = 4);

}  // namespace pillar::ckpt
