#include "ckpt/manifest.h"

#include <simdjson.h>
#include <xxhash.h>

#include "ckpt/checkpoint_format.h"
#include "common/clock.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::ckpt {
namespace {

constexpr std::string_view kDTypeNames[] = {"float32", "float64", "float16", "bfloat16",
                                            "int64",   "int32",   "int16",   "int8",
                                            "uint8",   "bool",    "blob"};
constexpr size_t kDTypeSizes[] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 1};

std::string Hex16(uint64_t v) { return Hex(v, 16); }

bool ParseHex16(std::string_view text, uint64_t* out) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = v << 4 | uint64_t(d);
  }
  *out = v;
  return true;
}

[[nodiscard]] absl::Status Bad(std::string_view source, std::string_view what) {
  return absl::DataLossError(StrCat(source, ": ", what));
}

// Line 1: JSON. Line 2: its checksum. Anything else is a torn or foreign file. Answers the JSON
// once its checksum matches.
[[nodiscard]] absl::StatusOr<std::string_view> CheckedJson(std::string_view text,
                                                           std::string_view source) {
  const size_t lf = text.find('\n');
  if (lf == std::string_view::npos) return Bad(source, "no checksum line (torn or not a manifest)");
  const std::string_view json = text.substr(0, lf);
  std::string_view rest = text.substr(lf + 1);
  if (rest.empty() || rest.back() != '\n') return Bad(source, "checksum line incomplete (torn)");
  rest.remove_suffix(1);
  uint64_t claimed = 0;
  if (rest.substr(0, format::kManifestChecksumPrefix.size()) != format::kManifestChecksumPrefix ||
      !ParseHex16(rest.substr(format::kManifestChecksumPrefix.size()), &claimed)) {
    return Bad(source, "second line is not \"xxh3:<16 hex digits>\"");
  }
  if (XXH3_64bits(json.data(), json.size()) != claimed) {
    return Bad(source, "checksum mismatch: the manifest was changed or damaged");
  }
  return json;
}

// The members before the shards: format, step, times and metadata.
[[nodiscard]] absl::Status ParseHeader(simdjson::dom::object& root, std::string_view source,
                                       Manifest& m) {
  std::string_view format_name, created;
  if (root["format"].get(format_name) != simdjson::SUCCESS || format_name != format::kFormatName) {
    return Bad(source, StrCat("not a ", format::kFormatName, " manifest"));
  }
  if (root["step"].get(m.step) != simdjson::SUCCESS || m.step < 0) return Bad(source, "bad step");
  if (root["created"].get(created) != simdjson::SUCCESS) return Bad(source, "no created time");
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(created), &t, &error)) {
    return Bad(source, "bad created time");
  }
  m.created_us = absl::ToUnixMicros(t);
  if (root["save_seconds"].get(m.save_seconds) != simdjson::SUCCESS ||
      root["snapshot_seconds"].get(m.snapshot_seconds) != simdjson::SUCCESS) {
    return Bad(source, "no save_seconds or snapshot_seconds");
  }
  simdjson::dom::object metadata;
  if (root["metadata"].get(metadata) != simdjson::SUCCESS) return Bad(source, "no metadata object");
  for (auto [key, value] : metadata) {
    std::string_view v;
    if (!ValidEntryName(key) || value.get(v) != simdjson::SUCCESS) {
      return Bad(source, "metadata must map names to strings");
    }
    m.metadata[std::string(key)] = std::string(v);
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ParseShards(simdjson::dom::array& shards, std::string_view source,
                                       Manifest& m) {
  for (simdjson::dom::element s : shards) {
    ShardInfo shard;
    std::string_view file, sum;
    if (s["file"].get(file) != simdjson::SUCCESS ||
        s["bytes"].get(shard.bytes) != simdjson::SUCCESS ||
        s["xxh3"].get(sum) != simdjson::SUCCESS || !ParseHex16(sum, &shard.xxh3)) {
      return Bad(source, StrCat("shard ", m.shards.size(), " lacks file, bytes or xxh3"));
    }
    // Shard files are named by position; anything else could point outside the directory.
    const std::string name = ShardFileName(m.shards.size());
    if (file != name)
      return Bad(source, StrCat("shard ", m.shards.size(), " must be named ", name));
    shard.file = std::string(file);
    m.shards.push_back(std::move(shard));
  }
  return absl::OkStatus();
}

// The next entry of `m` (whose shards are parsed), checked against its shard; `seen` holds the
// names of the entries before it.
[[nodiscard]] absl::StatusOr<EntryInfo> ParseEntry(simdjson::dom::element e,
                                                   std::string_view source, const Manifest& m,
                                                   std::map<std::string_view, bool>& seen) {
  EntryInfo entry;
  std::string_view name, dtype, sum;
  simdjson::dom::array shape;
  uint64_t shard = 0;
  if (e["name"].get(name) != simdjson::SUCCESS || e["dtype"].get(dtype) != simdjson::SUCCESS ||
      e["shape"].get(shape) != simdjson::SUCCESS || e["shard"].get(shard) != simdjson::SUCCESS ||
      e["offset"].get(entry.offset) != simdjson::SUCCESS ||
      e["bytes"].get(entry.bytes) != simdjson::SUCCESS || e["xxh3"].get(sum) != simdjson::SUCCESS ||
      !ParseHex16(sum, &entry.xxh3)) {
    return Bad(source, StrCat("entry ", m.entries.size(), " lacks a member"));
  }
  const std::string where = StrCat("entry '", name, "': ");
  auto bad = [&](std::string_view what) { return Bad(source, StrCat(where, what)); };
  if (!ValidEntryName(name)) return Bad(source, StrCat("entry ", m.entries.size(), ": bad name"));
  if (seen[name]) return bad("listed twice");
  seen[name] = true;
  std::optional<DType> parsed = ParseDType(dtype);
  if (!parsed) return bad(StrCat("unknown dtype '", dtype, "'"));
  entry.dtype = *parsed;
  if (shape.size() > size_t(format::kMaxRank)) return bad("rank above 16");
  for (simdjson::dom::element d : shape) {
    int64_t dim;
    if (d.get(dim) != simdjson::SUCCESS) return bad("bad dimension");
    entry.shape.push_back(dim);
  }
  const std::optional<uint64_t> counted = ShapeElements(entry.shape);
  if (!counted) return bad("a dimension is negative or the shape too large");
  const uint64_t elements = *counted;
  if (entry.dtype != DType::kBlob && elements * DTypeSize(entry.dtype) != entry.bytes) {
    return bad(StrCat("shape and dtype make ", elements * DTypeSize(entry.dtype),
                      " bytes, the entry has ", entry.bytes));
  }
  if (entry.dtype == DType::kBlob && !entry.shape.empty()) return bad("a blob has no shape");
  if (shard >= m.shards.size()) return bad(StrCat("names shard ", shard, " of ", m.shards.size()));
  entry.shard = uint32_t(shard);
  if (entry.offset % format::kEntryAlignment != 0) return bad("misaligned offset");
  const uint64_t shard_bytes = m.shards[shard].bytes;
  if (entry.offset > shard_bytes || entry.bytes > shard_bytes - entry.offset) {
    return bad("lies outside its shard");
  }
  entry.name = std::string(name);
  return entry;
}

}  // namespace

bool ValidEntryName(std::string_view name) {
  return !name.empty() && name.size() <= format::kMaxNameBytes &&
         name.find('\0') == std::string_view::npos;
}

std::optional<uint64_t> ShapeElements(std::span<const int64_t> shape) {
  if (shape.size() > size_t(format::kMaxRank)) return std::nullopt;
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && elements > (UINT64_MAX / 16) / uint64_t(dim)) return std::nullopt;
    elements *= uint64_t(dim);
  }
  return elements;
}

std::string_view DTypeName(DType dtype) { return kDTypeNames[size_t(dtype)]; }

std::string ShardFileName(size_t index) {
  std::string digits = std::to_string(index);
  if (digits.size() < size_t(format::kShardDigits)) {
    digits.insert(0, size_t(format::kShardDigits) - digits.size(), '0');
  }
  return StrCat(format::kShardPrefix, digits, format::kShardSuffix);
}

std::optional<DType> ParseDType(std::string_view name) {
  for (size_t i = 0; i < std::size(kDTypeNames); ++i) {
    if (kDTypeNames[i] == name) return DType(i);
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) { return kDTypeSizes[size_t(dtype)]; }

uint64_t Manifest::TotalBytes() const {
  uint64_t total = 0;
  for (const ShardInfo& s : shards) total += s.bytes;
  return total;
}

std::string Manifest::Encode() const {
  JsonWriter w(256 + entries.size() * 160);
  w.BeginObject();
  w.Key("format");
  w.String(format::kFormatName);
  w.Key("step");
  w.Int(step);
  w.Key("created");
  w.String(FormatUtcMicros(created_us));
  w.Key("save_seconds");
  w.Double(save_seconds);
  w.Key("snapshot_seconds");
  w.Double(snapshot_seconds);
  w.Key("metadata");
  w.BeginObject();
  for (const auto& [k, v] : metadata) {
    w.Key(k);
    w.String(v);
  }
  w.EndObject();
  w.Key("shards");
  w.BeginArray();
  for (const ShardInfo& s : shards) {
    w.BeginObject();
    w.Key("file");
    w.String(s.file);
    w.Key("bytes");
    w.Uint(s.bytes);
    w.Key("xxh3");
    w.String(Hex16(s.xxh3));
    w.EndObject();
  }
  w.EndArray();
  w.Key("entries");
  w.BeginArray();
  for (const EntryInfo& e : entries) {
    w.BeginObject();
    w.Key("name");
    w.String(e.name);
    w.Key("dtype");
    w.String(DTypeName(e.dtype));
    w.Key("shape");
    w.BeginArray();
    for (int64_t d : e.shape) w.Int(d);
    w.EndArray();
    w.Key("shard");
    w.Uint(e.shard);
    w.Key("offset");
    w.Uint(e.offset);
    w.Key("bytes");
    w.Uint(e.bytes);
    w.Key("xxh3");
    w.String(Hex16(e.xxh3));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string json = std::move(w).Take();
  const uint64_t sum = XXH3_64bits(json.data(), json.size());
  return StrCat(json, "\n", format::kManifestChecksumPrefix, Hex16(sum), "\n");
}

absl::StatusOr<Manifest> Manifest::Parse(std::string_view text, std::string_view source) {
  PILLAR_ASSIGN_OR_RETURN(const std::string_view json, CheckedJson(text, source));
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) {
    return Bad(source, "not a JSON object");
  }
  Manifest m;
  PILLAR_RETURN_IF_ERROR(ParseHeader(root, source, m));
  simdjson::dom::array shards, entries;
  if (root["shards"].get(shards) != simdjson::SUCCESS ||
      root["entries"].get(entries) != simdjson::SUCCESS) {
    return Bad(source, "no shards or entries array");
  }
  PILLAR_RETURN_IF_ERROR(ParseShards(shards, source, m));
  // Names are views into the parser's copy of the JSON, which outlives the map.
  std::map<std::string_view, bool> seen;
  for (simdjson::dom::element e : entries) {
    PILLAR_ASSIGN_OR_RETURN(EntryInfo entry, ParseEntry(e, source, m, seen));
    m.entries.push_back(std::move(entry));
  }
  return m;
}

}  // namespace pillar::ckpt
