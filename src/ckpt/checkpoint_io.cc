#include "ckpt/checkpoint_io.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "ckpt/checkpoint_format.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::ckpt {
namespace {

constexpr size_t kChunkBytes = 8 << 20;  // reads for verification, and hashing granularity

// Runs fn(i) for i in [0, n) on up to `threads` threads; the first error wins.
[[nodiscard]] absl::Status ForEachParallel(size_t n, int threads,
                                           const std::function<absl::Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      absl::Status s = fn(i);
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        if (first.ok()) first = std::move(s);
        next.store(n);  // stop handing out work
      }
    }
  };
  const int count = std::max(1, std::min<int>(threads, int(n)));
  std::vector<std::thread> pool;
  for (int t = 1; t < count; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first;
}

std::string Join(const std::string& dir, std::string_view name) { return StrCat(dir, "/", name); }

std::string Parent(const std::string& dir) {
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Refuses what Manifest::Parse would refuse, before a byte is written: a checkpoint that saves
// but never loads would lose the run. `names` holds the names of the entries before `i`.
[[nodiscard]] absl::Status CheckEntry(size_t i, const EntryView& e,
                                      std::set<std::string_view>& names) {
  if (!ValidEntryName(e.name)) {
    return absl::InvalidArgumentError(StrCat("entry ", i, ": names have 1 to 1024 bytes, no NUL"));
  }
  if (!names.insert(e.name).second) {
    return absl::InvalidArgumentError(StrCat("entry '", e.name, "' is given twice"));
  }
  if (e.dtype != DType::kBlob) {
    const std::optional<uint64_t> elements = ShapeElements(e.shape);
    if (!elements) {
      return absl::InvalidArgumentError(StrCat(
          "entry '", e.name, "': more than 16 dimensions, a negative one, or too many elements"));
    }
    if (*elements * DTypeSize(e.dtype) != e.data.size()) {
      return absl::InvalidArgumentError(StrCat("entry '", e.name, "': shape and dtype make ",
                                               *elements * DTypeSize(e.dtype),
                                               " bytes, the data has ", e.data.size()));
    }
  }
  return absl::OkStatus();
}

// Plans the shards: entries in order, a new shard when the next entry would overflow a
// non-empty one. Fills manifest.entries (all but checksums) and sizes manifest.shards; answers
// the indices of the entries each shard holds.
[[nodiscard]] absl::StatusOr<std::vector<std::vector<size_t>>> PlanShards(
    std::span<const EntryView> entries, uint64_t shard_bytes, Manifest& manifest) {
  std::set<std::string_view> names;
  std::vector<std::vector<size_t>> shard_entries;
  uint64_t fill = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const EntryView& e = entries[i];
    PILLAR_RETURN_IF_ERROR(CheckEntry(i, e, names));
    if (shard_entries.empty() || (fill > 0 && fill + e.data.size() > shard_bytes)) {
      shard_entries.emplace_back();
      fill = 0;
    }
    EntryInfo info;
    info.name = e.name;
    info.dtype = e.dtype;
    info.shape = e.dtype == DType::kBlob ? std::vector<int64_t>{} : e.shape;
    info.shard = uint32_t(shard_entries.size() - 1);
    info.offset = format::AlignEntryOffset(fill);
    info.bytes = e.data.size();
    fill = info.offset + info.bytes;
    shard_entries.back().push_back(i);
    manifest.entries.push_back(std::move(info));
  }
  if (shard_entries.empty()) shard_entries.emplace_back();  // an empty checkpoint: one empty shard
  manifest.shards.resize(shard_entries.size());
  return shard_entries;
}

// Writes shard `shard` (the entries `in_shard` of the plan) into `tmp`, zeros between them,
// and records its size and checksum and its entries' checksums in `manifest`.
[[nodiscard]] absl::Status WriteShard(Env& env, const std::string& tmp, size_t shard,
                                      const std::vector<size_t>& in_shard,
                                      std::span<const EntryView> entries, Manifest& manifest) {
  static const std::byte kZeros[format::kEntryAlignment] = {};
  ShardInfo& info = manifest.shards[shard];
  info.file = ShardFileName(shard);
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      env.NewWritableFile(Join(tmp, info.file), 0600);
  if (!file.ok()) return file.status();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  uint64_t at = 0;
  absl::Status s;
  for (size_t i : in_shard) {
    EntryInfo& e = manifest.entries[i];
    const std::span<const std::byte> pad(kZeros, e.offset - at);
    if (!pad.empty()) {
      XXH3_64bits_update(state, pad.data(), pad.size());
      if (s = (*file)->Append(pad); !s.ok()) break;
    }
    const std::span<const std::byte> data = entries[i].data;
    e.xxh3 = XXH3_64bits(data.data(), data.size());
    XXH3_64bits_update(state, data.data(), data.size());
    if (s = (*file)->Append(data); !s.ok()) break;
    at = e.offset + e.bytes;
  }
  info.bytes = at;
  info.xxh3 = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (s.ok()) s = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); s.ok()) s = closed;
  return s;
}

// Writes `text` to a new file at `path` and syncs it.
[[nodiscard]] absl::Status WriteSyncedFile(Env& env, const std::string& path,
                                           const std::string& text) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(path, 0600);
  if (!file.ok()) return file.status();
  absl::Status s = (*file)->Append(std::as_bytes(std::span(text.data(), text.size())));
  if (s.ok()) s = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); s.ok()) s = closed;
  return s;
}

}  // namespace

[[nodiscard]] absl::StatusOr<Manifest> WriteCheckpoint(
    Env& env, const std::string& dir, int64_t step, std::span<const EntryView> entries,
    const std::map<std::string, std::string>& metadata, const WriteOptions& options) {
  const absl::Time start = absl::Now();
  if (env.Exists(dir)) return absl::AlreadyExistsError(StrCat("checkpoint ", dir, " exists"));
  for (const auto& [key, value] : metadata) {
    if (!ValidEntryName(key)) {
      return absl::InvalidArgumentError("metadata keys have 1 to 1024 bytes and no NUL");
    }
  }
  Manifest manifest;
  manifest.step = step;
  manifest.metadata = metadata;
  manifest.snapshot_seconds = options.snapshot_seconds;
  PILLAR_ASSIGN_OR_RETURN(const std::vector<std::vector<size_t>> shard_entries,
                          PlanShards(entries, options.shard_bytes, manifest));

  const std::string tmp = StrCat(dir, format::kTmpSuffix);
  PILLAR_RETURN_IF_ERROR(env.RemoveAll(tmp));
  PILLAR_RETURN_IF_ERROR(env.CreateDir(tmp));
  absl::Status written = ForEachParallel(shard_entries.size(), options.threads, [&](size_t shard) {
    return WriteShard(env, tmp, shard, shard_entries[shard], entries, manifest);
  });
  if (!written.ok()) return written;
  manifest.created_us = absl::ToUnixMicros(absl::Now());
  manifest.save_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  PILLAR_RETURN_IF_ERROR(WriteSyncedFile(env, Join(tmp, format::kManifestFile), manifest.Encode()));
  // The names inside the directory first, then the directory's own name in its parent.
  PILLAR_RETURN_IF_ERROR(env.SyncDir(tmp));
  PILLAR_RETURN_IF_ERROR(env.Rename(tmp, dir));
  PILLAR_RETURN_IF_ERROR(env.SyncDir(Parent(dir)));
  return manifest;
}

[[nodiscard]] absl::StatusOr<Manifest> ReadManifest(Env& env, const std::string& dir) {
  const std::string path = Join(dir, format::kManifestFile);
  absl::StatusOr<std::string> text = ReadWholeFile(env, path, format::kMaxManifestBytes);
  if (!text.ok()) return text.status();
  return Manifest::Parse(*text, path);
}

namespace {

// Entries in the order their bytes lie in the shard; an empty entry shares its offset with the
// entry after it and comes first.
bool ByPlace(const EntryInfo* a, const EntryInfo* b) {
  return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
}

// The entries of `shard`, in the order their bytes lie in it.
std::vector<const EntryInfo*> EntriesInShard(const Manifest& manifest, size_t shard) {
  std::vector<const EntryInfo*> in_shard;
  for (const EntryInfo& e : manifest.entries) {
    if (e.shard == shard) in_shard.push_back(&e);
  }
  std::sort(in_shard.begin(), in_shard.end(), ByPlace);
  return in_shard;
}

// The entries of a shard, in the order their bytes lie, must not overlap (Manifest::Parse keeps
// each inside its shard, not apart from the others). Checked before either reader below, which
// both walk the entries in that order: over an overlap the streaming one hashed a length that
// had wrapped around (a crash) or passed an entry it never reached (review helper-121).
[[nodiscard]] absl::Status CheckLayout(const std::string& path,
                                       const std::vector<const EntryInfo*>& in_shard) {
  uint64_t at = 0;
  for (const EntryInfo* e : in_shard) {
    if (e->offset < at) {
      return absl::DataLossError(StrCat(path, ": entries overlap (entry '", e->name, "')"));
    }
    at = e->offset + e->bytes;
  }
  return absl::OkStatus();
}

// Mapped: one pass over the bytes. Each entry's checksum covers the entry and the alignment
// gaps must be zeros, so every byte of the shard is checked without hashing it twice (the shard
// checksum is for streaming readers: `pillar ckpt verify`, draining).
[[nodiscard]] absl::Status CheckMappedShard(const std::string& path, const ShardInfo& info,
                                            const std::vector<const EntryInfo*>& in_shard,
                                            const std::byte* data) {
  uint64_t at = 0;
  for (const EntryInfo* e : in_shard) {
    for (uint64_t i = at; i < e->offset; ++i) {
      if (data[i] != std::byte{0}) {
        return absl::DataLossError(StrCat(path, ": byte ", i, " between entries is not zero"));
      }
    }
    if (XXH3_64bits(data + e->offset, e->bytes) != e->xxh3) {
      return absl::DataLossError(StrCat(path, ": entry '", e->name, "' checksum mismatch"));
    }
    at = e->offset + e->bytes;
  }
  if (at != info.bytes) {
    return absl::DataLossError(StrCat(path, ": ", info.bytes - at, " bytes after the last entry"));
  }
  return absl::OkStatus();
}

// Streaming: the shard checksum over chunks; entry checksums need each entry whole, so they are
// checked as each entry's bytes pass (an entry straddles chunks: a per-entry state).
[[nodiscard]] absl::Status CheckStreamedShard(Env& env, const std::string& path,
                                              const ShardInfo& info,
                                              const std::vector<const EntryInfo*>& in_shard) {
  XXH3_state_t* whole = XXH3_createState();
  XXH3_state_t* entry = XXH3_createState();
  XXH3_64bits_reset(whole);
  std::vector<std::byte> chunk(kChunkBytes);
  size_t next = 0;
  bool in_entry = false;
  absl::Status status;
  for (uint64_t at = 0; at < info.bytes && status.ok();) {
    const size_t n = size_t(std::min<uint64_t>(chunk.size(), info.bytes - at));
    status = env.ReadAt(path, at, std::span(chunk.data(), n));
    if (!status.ok()) break;
    XXH3_64bits_update(whole, chunk.data(), n);
    uint64_t pos = at;
    while (pos < at + n && next < in_shard.size()) {
      const EntryInfo& e = *in_shard[next];
      if (!in_entry) {
        if (e.offset >= at + n) break;
        if (pos < e.offset) pos = e.offset;
        XXH3_64bits_reset(entry);
        in_entry = true;
      }
      const uint64_t end = std::min(at + n, e.offset + e.bytes);
      XXH3_64bits_update(entry, chunk.data() + (pos - at), end - pos);
      pos = end;
      if (pos == e.offset + e.bytes) {
        if (XXH3_64bits_digest(entry) != e.xxh3) {
          status = absl::DataLossError(StrCat(path, ": entry '", e.name, "' checksum mismatch"));
          break;
        }
        in_entry = false;
        ++next;
      }
    }
    at += n;
  }
  // Zero-length entries at the very end never enter the loop above.
  while (status.ok() && next < in_shard.size() && in_shard[next]->bytes == 0) {
    if (XXH3_64bits(nullptr, 0) != in_shard[next]->xxh3) {
      status = absl::DataLossError(
          StrCat(path, ": entry '", in_shard[next]->name, "' checksum mismatch"));
    }
    ++next;
  }
  // Every entry was reached: the layout puts each one inside the bytes just read.
  if (status.ok() && next != in_shard.size()) {
    status = absl::DataLossError(
        StrCat(path, ": entry '", in_shard[next]->name, "' lies outside the bytes read"));
  }
  if (status.ok() && XXH3_64bits_digest(whole) != info.xxh3) {
    status = absl::DataLossError(StrCat(path, ": checksum mismatch (the shard is damaged)"));
  }
  XXH3_freeState(whole);
  XXH3_freeState(entry);
  return status;
}

// Checks one shard's size against the manifest and its bytes (in `data`, or read from disk in
// chunks when `data` is null) against the shard and entry checksums.
[[nodiscard]] absl::Status CheckShard(Env& env, const std::string& dir, const Manifest& manifest,
                                      size_t shard, const std::byte* data) {
  const ShardInfo& info = manifest.shards[shard];
  const std::string path = Join(dir, info.file);
  absl::StatusOr<uint64_t> size = env.FileSize(path);
  if (!size.ok()) return size.status();
  if (*size != info.bytes) {
    return absl::DataLossError(StrCat(path, ": ", *size, " bytes, the manifest says ", info.bytes,
                                      " (truncated or torn)"));
  }
  const std::vector<const EntryInfo*> in_shard = EntriesInShard(manifest, shard);
  PILLAR_RETURN_IF_ERROR(CheckLayout(path, in_shard));
  if (data != nullptr) return CheckMappedShard(path, info, in_shard, data);
  return CheckStreamedShard(env, path, info, in_shard);
}

}  // namespace

[[nodiscard]] absl::Status VerifyCheckpoint(Env& env, const std::string& dir,
                                            const Manifest& manifest, int threads) {
  return ForEachParallel(manifest.shards.size(), threads, [&](size_t shard) {
    return CheckShard(env, dir, manifest, shard, nullptr);
  });
}

std::span<const std::byte> LoadedCheckpoint::Data(std::string_view name) const {
  const EntryInfo* e = Find(name);
  if (e == nullptr) return {};
  return shards_[e->shard]->data().subspan(e->offset, e->bytes);
}

const EntryInfo* LoadedCheckpoint::Find(std::string_view name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : found->second;
}

[[nodiscard]] absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(Env& env, const std::string& dir,
                                                              int threads) {
  absl::StatusOr<Manifest> manifest = ReadManifest(env, dir);
  if (!manifest.ok()) return manifest.status();
  LoadedCheckpoint loaded;
  loaded.shards_.resize(manifest->shards.size());
  absl::Status read = ForEachParallel(manifest->shards.size(), threads, [&](size_t shard) {
    const ShardInfo& info = manifest->shards[shard];
    absl::StatusOr<uint64_t> size = env.FileSize(Join(dir, info.file));
    if (!size.ok()) return size.status();
    if (*size != info.bytes) {
      return absl::DataLossError(StrCat(Join(dir, info.file), ": ", *size,
                                        " bytes, the manifest says ", info.bytes,
                                        " (truncated or torn)"));
    }
    absl::StatusOr<std::unique_ptr<MappedFile>> mapped = env.MapFile(Join(dir, info.file));
    if (!mapped.ok()) return mapped.status();
    if ((*mapped)->data().size() != info.bytes) {
      return absl::DataLossError(StrCat(Join(dir, info.file), " changed while being loaded"));
    }
    loaded.shards_[shard] = std::move(*mapped);
    return CheckShard(env, dir, *manifest, shard, loaded.shards_[shard]->data().data());
  });
  if (!read.ok()) return read;
  loaded.manifest_ = std::move(*manifest);
  loaded.by_name_.reserve(loaded.manifest_.entries.size());
  for (const EntryInfo& e : loaded.manifest_.entries) loaded.by_name_.emplace(e.name, &e);
  return loaded;
}

}  // namespace pillar::ckpt
