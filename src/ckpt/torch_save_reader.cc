#include "ckpt/torch_save_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "ckpt/env.h"
#include "common/strings.h"

namespace pillar::ckpt {
namespace {

// torch.save names storages "0", "1", ...: a longer key is no torch.save file, and copying a
// long memoized key into each storage would let a few bytes of pickle cost kilobytes.
constexpr size_t kMaxStorageKey = 256;

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

struct ZipEntry {
  uint64_t offset = 0;  // of the data
  uint64_t size = 0;
};

absl::StatusOr<std::map<std::string, ZipEntry>> ReadZip(std::span<const std::byte> bytes) {
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
    entries[name] = {data, size};
    at += 46 + name_len + extra_len + comment_len;
  }
  return entries;
}

// ---- The pickle: a small stack machine for the opcodes torch.save emits.

struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage,
                    kTensor, kMark };
  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value();

  // Moves this value's children (items, storage) to `out`, leaving it a leaf.
  void ReleaseChildren(std::vector<ValuePtr>& out) {
    for (ValuePtr& item : items) out.push_back(std::move(item));
    items.clear();
    if (storage != nullptr) out.push_back(std::move(storage));
  }

  Kind kind = Kind::kNone;
  int64_t i = 0;
  std::string s;                // string; a global's "module.name"; a storage's key
  std::vector<ValuePtr> items;  // tuple, list; a dict's keys and values alternating
  DType dtype = DType::kFloat32;  // storage
  ValuePtr storage;               // tensor
  std::vector<int64_t> size, stride;
  uint32_t depth = 1;   // levels of containers down to the deepest leaf, this one included
  bool nested = false;  // inside a container or tensor, and so never changed again
};

// Frees the children iteratively: the default destructor would recurse once per level of
// nesting, and a deep enough value tree (a million nested lists fit in 2 MB of pickle)
// overflows the stack. Each value whose last owner is here gives up its children to the
// worklist before it is destroyed, so no destructor below this one has children to free.
Value::~Value() {
  if (items.empty() && storage == nullptr) return;
  std::vector<ValuePtr> pending;
  ReleaseChildren(pending);
  while (!pending.empty()) {
    ValuePtr v = std::move(pending.back());
    pending.pop_back();
    if (v.use_count() == 1) v->ReleaseChildren(pending);
  }
}

ValuePtr Make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

std::optional<DType> StorageDType(std::string_view global) {
  static const std::pair<std::string_view, DType> kStorages[] = {
      {"torch.FloatStorage", DType::kFloat32}, {"torch.DoubleStorage", DType::kFloat64},
      {"torch.HalfStorage", DType::kFloat16},  {"torch.BFloat16Storage", DType::kBFloat16},
      {"torch.LongStorage", DType::kInt64},    {"torch.IntStorage", DType::kInt32},
      {"torch.ShortStorage", DType::kInt16},   {"torch.CharStorage", DType::kInt8},
      {"torch.ByteStorage", DType::kUInt8},    {"torch.BoolStorage", DType::kBool}};
  for (const auto& [name, dtype] : kStorages) {
    if (name == global) return dtype;
  }
  return std::nullopt;
}

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> p, const TorchSaveLimits& limits) : p_(p), limits_(limits) {}

  absl::StatusOr<ValuePtr> Run() {
    for (;;) {
      if (pos_ >= p_.size()) return Bad("ends without STOP");
      const uint8_t op = uint8_t(p_[pos_++]);
      absl::Status s = Step(op);
      if (!s.ok()) return s;
      if (op == '.') {
        if (stack_.size() != 1) return Bad("STOP with a stack of other than one value");
        return stack_.back();
      }
      if (stack_.size() > limits_.max_stack) {
        return Bad(
            StrCat("holds more than ", limits_.max_stack, " values on its stack (the limit)"));
      }
    }
  }

 private:
  absl::Status Bad(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("torch.save pickle at byte ", pos_, ": ", what));
  }
  bool Need(uint64_t n) const { return n <= p_.size() - pos_; }
  uint64_t U(int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | uint64_t(p_[pos_ + size_t(i)]);
    pos_ += size_t(n);
    return v;
  }
  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::kMark) {
      return Bad("pops an empty stack");
    }
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // The values above the topmost mark, and the mark removed.
  absl::StatusOr<std::vector<ValuePtr>> PopMark() {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i]->kind == Value::Kind::kMark) {
        std::vector<ValuePtr> items(stack_.begin() + ptrdiff_t(i) + 1, stack_.end());
        stack_.resize(i);
        return items;
      }
    }
    return Bad("no mark");
  }
  absl::Status PushString(uint64_t len) {
    if (!Need(len)) return Bad("string runs past the end");
    ValuePtr v = Make(Value::Kind::kString);
    v->s.assign(reinterpret_cast<const char*>(p_.data() + pos_), len);
    pos_ += len;
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::Status PushInt(int64_t i) {
    ValuePtr v = Make(Value::Kind::kInt);
    v->i = i;
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::Status Memo(uint64_t index) {
    if (stack_.empty()) return Bad("memoizes an empty stack");
    if (index > 100'000'000) return Bad("memo index too large");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Bad("reads an unset memo slot");
    stack_.push_back(it->second);
    return absl::OkStatus();
  }
  // Puts `child` into `parent`, a new tuple or a list or dict being filled (see Modifiable).
  absl::Status Adopt(Value& parent, ValuePtr child) {
    if (child.get() == &parent) return Bad("puts a container inside itself");
    if (child->depth >= limits_.max_nesting) {
      return Bad(
          StrCat("nests containers more than ", limits_.max_nesting, " levels deep (the limit)"));
    }
    parent.depth = std::max(parent.depth, child->depth + 1);
    child->nested = true;
    parent.items.push_back(std::move(child));
    return absl::OkStatus();
  }
  // Whether the list or dict on top of the stack may take more items. One already inside
  // another container is refused: the pickler fills each container before anything holds it,
  // so only a recursive structure (never part of a state_dict) would need it, and refusing it
  // keeps the values free of cycles (which shared_ptr would leak) and every recorded depth exact.
  absl::Status Modifiable(Value::Kind kind, std::string_view what) {
    if (stack_.empty() || stack_.back()->kind != kind) return Bad(what);
    if (stack_.back()->nested) return Bad("changes a container already inside another");
    return absl::OkStatus();
  }
  absl::Status Reduce(const ValuePtr& callable, const ValuePtr& args);
  absl::Status SetItems(std::vector<ValuePtr> items);
  absl::Status Step(uint8_t op);

  std::span<const std::byte> p_;
  const TorchSaveLimits limits_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::map<uint64_t, ValuePtr> memo_;
};

absl::Status Unpickler::SetItems(std::vector<ValuePtr> items) {
  if (items.size() % 2 != 0) return Bad("odd number of dict items");
  if (absl::Status s = Modifiable(Value::Kind::kDict, "sets items on a non-dict"); !s.ok()) {
    return s;
  }
  Value& dict = *stack_.back();
  for (ValuePtr& v : items) {
    if (absl::Status s = Adopt(dict, std::move(v)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Unpickler::Reduce(const ValuePtr& callable, const ValuePtr& args) {
  if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple) {
    return Bad("calls something that is not a known function");
  }
  const std::vector<ValuePtr>& a = args->items;
  auto is = [](const ValuePtr& v, Value::Kind k) { return v->kind == k; };
  auto ints = [&](const ValuePtr& v, std::vector<int64_t>* out) {
    if (!is(v, Value::Kind::kTuple)) return false;
    for (const ValuePtr& d : v->items) {
      if (!is(d, Value::Kind::kInt) || d->i < 0) return false;
      out->push_back(d->i);
    }
    return out->size() <= 16;
  };
  if (callable->s == "collections.OrderedDict") {
    stack_.push_back(Make(Value::Kind::kDict));
    return absl::OkStatus();
  }
  if (callable->s == "torch._utils._rebuild_tensor_v2") {
    if (a.size() < 4 || !is(a[0], Value::Kind::kStorage) || !is(a[1], Value::Kind::kInt) ||
        a[1]->i < 0) {
      return Bad("_rebuild_tensor_v2 with unexpected arguments");
    }
    ValuePtr t = Make(Value::Kind::kTensor);
    a[0]->nested = true;
    t->storage = a[0];
    t->depth = a[0]->depth + 1;
    t->i = a[1]->i;  // storage offset, in elements
    if (!ints(a[2], &t->size) || !ints(a[3], &t->stride) || t->size.size() != t->stride.size()) {
      return Bad("a tensor's size and stride must be tuples of the same length");
    }
    stack_.push_back(std::move(t));
    return absl::OkStatus();
  }
  if (callable->s == "torch._utils._rebuild_parameter") {
    if (a.empty() || !is(a[0], Value::Kind::kTensor)) return Bad("_rebuild_parameter without a tensor");
    stack_.push_back(a[0]);
    return absl::OkStatus();
  }
  return Bad(StrCat("refuses to call ", callable->s, " (not part of a state_dict)"));
}

absl::Status Unpickler::Step(uint8_t op) {
  using K = Value::Kind;
  switch (op) {
    case 0x80:  // PROTO
      if (!Need(1)) return Bad("truncated");
      pos_ += 1;
      return absl::OkStatus();
    case 0x95:  // FRAME (protocol 4): a length we do not need
      if (!Need(8)) return Bad("truncated");
      pos_ += 8;
      return absl::OkStatus();
    case '}':
      stack_.push_back(Make(K::kDict));
      return absl::OkStatus();
    case ']':
      stack_.push_back(Make(K::kList));
      return absl::OkStatus();
    case ')':
      stack_.push_back(Make(K::kTuple));
      return absl::OkStatus();
    case '(':
      stack_.push_back(Make(K::kMark));
      return absl::OkStatus();
    case 'N':
      stack_.push_back(Make(K::kNone));
      return absl::OkStatus();
    case 0x88:
    case 0x89: {
      ValuePtr v = Make(K::kBool);
      v->i = op == 0x88;
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'X':  // BINUNICODE
    case 'T':  // BINSTRING
    case 'B':  // BINBYTES
      if (!Need(4)) return Bad("truncated");
      return PushString(U(4));
    case 'U':  // SHORT_BINSTRING
    case 'C':  // SHORT_BINBYTES
    case 0x8c:  // SHORT_BINUNICODE
      if (!Need(1)) return Bad("truncated");
      return PushString(U(1));
    case 'K':
      if (!Need(1)) return Bad("truncated");
      return PushInt(int64_t(U(1)));
    case 'M':
      if (!Need(2)) return Bad("truncated");
      return PushInt(int64_t(U(2)));
    case 'J':
      if (!Need(4)) return Bad("truncated");
      return PushInt(int64_t(int32_t(uint32_t(U(4)))));
    case 0x8a: {  // LONG1
      if (!Need(1)) return Bad("truncated");
      const uint64_t n = U(1);
      if (n > 8 || !Need(n)) return Bad("integer too long");
      uint64_t v = n == 0 ? 0 : U(int(n));
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign
      return PushInt(int64_t(v));
    }
    case 'G': {  // BINFLOAT, big-endian
      if (!Need(8)) return Bad("truncated");
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = bits << 8 | uint64_t(p_[pos_++]);
      ValuePtr v = Make(K::kFloat);
      std::memcpy(&v->i, &bits, 8);
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'c': {  // GLOBAL "module\nname\n"
      std::string parts[2];
      for (std::string& part : parts) {
        while (pos_ < p_.size() && char(p_[pos_]) != '\n' && part.size() < 256) {
          part += char(p_[pos_++]);
        }
        if (pos_ >= p_.size() || char(p_[pos_]) != '\n') return Bad("broken GLOBAL");
        ++pos_;
      }
      ValuePtr v = Make(K::kGlobal);
      v->s = parts[0] + "." + parts[1];
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'q':
      if (!Need(1)) return Bad("truncated");
      return Memo(U(1));
    case 'r':
      if (!Need(4)) return Bad("truncated");
      return Memo(U(4));
    case 0x94:  // MEMOIZE
      return Memo(memo_.size());
    case 'h':
      if (!Need(1)) return Bad("truncated");
      return Get(U(1));
    case 'j':
      if (!Need(4)) return Bad("truncated");
      return Get(U(4));
    case 't': {
      absl::StatusOr<std::vector<ValuePtr>> items = PopMark();
      if (!items.ok()) return items.status();
      ValuePtr v = Make(K::kTuple);
      for (ValuePtr& item : *items) {
        if (absl::Status s = Adopt(*v, std::move(item)); !s.ok()) return s;
      }
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 0x85:
    case 0x86:
    case 0x87: {
      const size_t n = size_t(op - 0x84);
      ValuePtr popped[3];
      for (size_t i = n; i-- > 0;) {
        absl::StatusOr<ValuePtr> item = Pop();
        if (!item.ok()) return item.status();
        popped[i] = std::move(*item);
      }
      ValuePtr v = Make(K::kTuple);
      for (size_t i = 0; i < n; ++i) {
        if (absl::Status s = Adopt(*v, std::move(popped[i])); !s.ok()) return s;
      }
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'Q': {  // BINPERSID: ('storage', storage type, key, location, numel)
      absl::StatusOr<ValuePtr> pid = Pop();
      if (!pid.ok()) return pid.status();
      const std::vector<ValuePtr>& a = (*pid)->items;
      if ((*pid)->kind != K::kTuple || a.size() != 5 || a[0]->kind != K::kString ||
          a[0]->s != "storage" || a[1]->kind != K::kGlobal || a[2]->kind != K::kString) {
        return Bad("a persistent id that is not a storage");
      }
      std::optional<DType> dtype = StorageDType(a[1]->s);
      if (!dtype) return Bad(StrCat("unsupported storage type ", a[1]->s));
      if (a[2]->s.size() > kMaxStorageKey) {
        return Bad(StrCat("a storage key longer than ", kMaxStorageKey, " bytes"));
      }
      ValuePtr v = Make(K::kStorage);
      v->s = a[2]->s;
      v->dtype = *dtype;
      stack_.push_back(std::move(v));
      return absl::OkStatus();
    }
    case 'R': {
      absl::StatusOr<ValuePtr> args = Pop();
      if (!args.ok()) return args.status();
      absl::StatusOr<ValuePtr> callable = Pop();
      if (!callable.ok()) return callable.status();
      return Reduce(*callable, *args);
    }
    case 's': {
      absl::StatusOr<ValuePtr> value = Pop();
      if (!value.ok()) return value.status();
      absl::StatusOr<ValuePtr> key = Pop();
      if (!key.ok()) return key.status();
      return SetItems({*key, *value});
    }
    case 'u': {
      absl::StatusOr<std::vector<ValuePtr>> items = PopMark();
      if (!items.ok()) return items.status();
      return SetItems(std::move(*items));
    }
    case 'a': {
      absl::StatusOr<ValuePtr> value = Pop();
      if (!value.ok()) return value.status();
      if (absl::Status s = Modifiable(K::kList, "appends to a non-list"); !s.ok()) return s;
      return Adopt(*stack_.back(), std::move(*value));
    }
    case 'e': {
      absl::StatusOr<std::vector<ValuePtr>> items = PopMark();
      if (!items.ok()) return items.status();
      if (absl::Status s = Modifiable(K::kList, "appends to a non-list"); !s.ok()) return s;
      Value& list = *stack_.back();
      for (ValuePtr& v : *items) {
        if (absl::Status s = Adopt(list, std::move(v)); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    case 'b': {  // BUILD: state for the object below (a state_dict's _metadata): not needed
      absl::StatusOr<ValuePtr> state = Pop();
      if (!state.ok()) return state.status();
      if (stack_.empty() || (stack_.back()->kind != K::kDict && stack_.back()->kind != K::kTensor)) {
        return Bad("BUILD on an object other than a dict or tensor");
      }
      return absl::OkStatus();
    }
    case '.':
      return absl::OkStatus();
    default:
      return Bad(StrCat("unsupported opcode 0x", Hex(op, 2)));
  }
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

}  // namespace

absl::StatusOr<TorchSaveFile> ParseTorchSave(std::span<const std::byte> bytes,
                                             const TorchSaveLimits& limits) {
  absl::StatusOr<std::map<std::string, ZipEntry>> zip = ReadZip(bytes);
  if (!zip.ok()) return zip.status();
  std::string prefix;
  const ZipEntry* pickle = nullptr;
  for (const auto& [name, entry] : *zip) {
    const std::string_view n = name;
    if (n.size() >= 8 && n.substr(n.size() - 8) == "data.pkl") {
      prefix = name.substr(0, name.size() - 8);
      pickle = &entry;
      break;
    }
  }
  if (pickle == nullptr) return absl::InvalidArgumentError("not a torch.save file: no data.pkl");
  Unpickler unpickler(bytes.subspan(pickle->offset, pickle->size), limits);
  absl::StatusOr<ValuePtr> root = unpickler.Run();
  if (!root.ok()) return root.status();
  if ((*root)->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError("the file holds no dict of tensors (a state_dict)");
  }
  TorchSaveFile file;
  auto copies = std::make_shared<std::vector<std::vector<std::byte>>>();
  // Every byte the result holds beyond the file's counts against one cap (see
  // TorchSaveLimits), checked before it is allocated.
  uint64_t cap = 0;
  if (__builtin_mul_overflow(limits.max_materialised_per_file_byte, uint64_t(bytes.size()), &cap)) {
    cap = UINT64_MAX;
  }
  uint64_t materialised = 0;
  auto charge = [&](uint64_t n, std::string_view name) -> absl::Status {
    if (n <= cap - materialised) {
      materialised += n;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        StrCat("tensor '", Shortened(name), "': the tensors' copies, names and shapes would take ",
               "more than ", cap, " bytes, ", limits.max_materialised_per_file_byte,
               " times the file's size (the limit)"));
  };
  // A strided view is copied once, however many tensors name it: tied weights and hostile files
  // alike may refer to one view many times, and the tensors can share the copy's bytes.
  using ViewKey =
      std::tuple<std::string_view, DType, int64_t, std::vector<int64_t>, std::vector<int64_t>>;
  std::map<ViewKey, std::span<const std::byte>> gathered;
  const std::vector<ValuePtr>& items = (*root)->items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind != Value::Kind::kString || items[i + 1]->kind != Value::Kind::kTensor) {
      return absl::InvalidArgumentError("every key must be a string and every value a tensor");
    }
    const std::string& name = items[i]->s;
    const Value& t = *items[i + 1];
    auto storage = zip->find(prefix + "data/" + t.storage->s);
    if (storage == zip->end()) {
      return absl::InvalidArgumentError(
          StrCat("tensor '", Shortened(name), "': its storage is missing"));
    }
    const uint64_t element = DTypeSize(t.storage->dtype);
    const uint64_t storage_elements = storage->second.size / element;
    // Every product and sum checked: sizes, strides and the offset come from the file.
    uint64_t numel = 1;
    uint64_t last = uint64_t(t.i);  // the highest element index the view touches
    bool overflow = false;
    for (size_t d = 0; d < t.size.size(); ++d) {
      const uint64_t n = uint64_t(t.size[d]);
      overflow |= __builtin_mul_overflow(numel, n, &numel);
      uint64_t reach = 0;
      if (n > 0) overflow |= __builtin_mul_overflow(n - 1, uint64_t(t.stride[d]), &reach);
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
    // The name and shape are copied into the result: a memoized name or tensor costs the pickle
    // two bytes per reference, so they are charged like the data.
    if (absl::Status s =
            charge(sizeof(TorchSaveTensor) + name.size() + t.size.size() * sizeof(int64_t), name);
        !s.ok()) {
      return s;
    }
    const std::byte* base = bytes.data() + storage->second.offset;
    TorchSaveTensor out{name, t.storage->dtype, t.size, {}};
    if (numel == 0) {
      out.data = {};
    } else if (Contiguous(t.size, t.stride)) {
      out.data = std::span(base + uint64_t(t.i) * element, numel * element);
    } else {
      // A strided view (a transposed weight): gather it into row-major order, once.
      ViewKey key{t.storage->s, t.storage->dtype, t.i, t.size, t.stride};
      auto seen = gathered.find(key);
      if (seen != gathered.end()) {
        out.data = seen->second;
      } else {
        if (absl::Status s = charge(numel * element, name); !s.ok()) return s;
        std::vector<std::byte>& copy = copies->emplace_back(numel * element);
        std::vector<int64_t> index(t.size.size(), 0);
        for (uint64_t n = 0; n < numel; ++n) {
          uint64_t at = uint64_t(t.i);
          for (size_t d = 0; d < index.size(); ++d) {
            at += uint64_t(index[d]) * uint64_t(t.stride[d]);
          }
          std::memcpy(copy.data() + n * element, base + at * element, element);
          for (size_t d = index.size(); d-- > 0;) {
            if (++index[d] < t.size[d]) break;
            index[d] = 0;
          }
        }
        out.data = copy;
        gathered.emplace(std::move(key), out.data);
      }
    }
    file.tensors.push_back(std::move(out));
  }
  file.keep_alive = copies;
  return file;
}

absl::StatusOr<TorchSaveFile> ReadTorchSave(const std::string& path,
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
