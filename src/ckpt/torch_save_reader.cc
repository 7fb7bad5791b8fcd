#include "ckpt/torch_save_reader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "common/env.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::ckpt {
namespace {

// torch.save names storages "0", "1", ...: a longer key is no torch.save file, and each tensor's
// lookup of its storage copies the key.
constexpr size_t kMaxStorageKey = 256;

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

// Frees the children iteratively: the default destructor would recurse once per level of
// nesting, and a deep enough value tree (a million nested lists fit in 2 MB of pickle)
// overflows the stack. A child whose last owner is here and that has children of its own goes to
// a worklist, which takes those children before destroying it, so no destructor below this one
// has children to free. Every other child is let go at once, so that one held twice here is
// last owned by its second slot and goes to the worklist from there.
Value::~Value() {
  if (items.empty()) return;
  std::vector<ValuePtr> pending;
  auto release = [&pending](std::vector<ValuePtr>& children) {
    for (ValuePtr& child : children) {
      if (child.use_count() == 1 && !child->items.empty()) {
        pending.push_back(std::move(child));
      } else {
        child.reset();  // a leaf, or a value still held elsewhere: nothing below it is freed
      }
    }
    children.clear();
  };
  release(items);
  while (!pending.empty()) {
    ValuePtr v = std::move(pending.back());
    pending.pop_back();
    release(v->items);
  }
}

// What a value costs the budget: its one block (make_shared puts the value after the control
// block's vtable pointer and two counts), and for a container, its entry on the worklist that
// frees it, which doubles as it grows and so holds up to three pointers an entry while it moves.
constexpr uint64_t kValueCost = Allocation(sizeof(Value) + sizeof(void*) + 2 * sizeof(int32_t));
constexpr uint64_t kWorklistCost = 3 * sizeof(ValuePtr);

bool IsContainer(Value::Kind kind) {
  using K = Value::Kind;
  return kind == K::kTuple || kind == K::kList || kind == K::kDict || kind == K::kTensor;
}

// A global's "module\nname" as Python writes it, for messages.
std::string Dotted(std::string_view global) {
  std::string out(global);
  std::replace(out.begin(), out.end(), '\n', '.');
  return out;
}

std::optional<DType> StorageDType(std::string_view global) {
  static const std::pair<std::string_view, DType> kStorages[] = {
      {"torch\nFloatStorage", DType::kFloat32}, {"torch\nDoubleStorage", DType::kFloat64},
      {"torch\nHalfStorage", DType::kFloat16},  {"torch\nBFloat16Storage", DType::kBFloat16},
      {"torch\nLongStorage", DType::kInt64},    {"torch\nIntStorage", DType::kInt32},
      {"torch\nShortStorage", DType::kInt16},   {"torch\nCharStorage", DType::kInt8},
      {"torch\nByteStorage", DType::kUInt8},    {"torch\nBoolStorage", DType::kBool}};
  for (const auto& [name, dtype] : kStorages) {
    if (name == global) return dtype;
  }
  return std::nullopt;
}

// A tensor's size or stride: a tuple of at most 16 non-negative ints.
bool IsShape(const Value& v) {
  if (v.kind != Value::Kind::kTuple || v.items.size() > 16) return false;
  for (const ValuePtr& d : v.items) {
    if (d->kind != Value::Kind::kInt || d->i < 0) return false;
  }
  return true;
}

std::vector<int64_t> Ints(const Value& shape) {
  std::vector<int64_t> out;
  out.reserve(shape.items.size());
  for (const ValuePtr& d : shape.items) out.push_back(d->i);
  return out;
}

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> p, const TorchSaveLimits& limits, MemoryBudget& budget)
      : p_(p), limits_(limits), budget_(budget) {}

  [[nodiscard]] absl::StatusOr<ValuePtr> Run() {
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
  [[nodiscard]] absl::Status Bad(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("torch.save pickle at byte ", pos_, ": ", what));
  }
  [[nodiscard]] absl::Status OverBudget() const { return Bad(budget_.Exceeded()); }
  bool Need(uint64_t n) const { return n <= p_.size() - pos_; }
  uint64_t U(int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | uint64_t(p_[pos_ + size_t(i)]);
    pos_ += size_t(n);
    return v;
  }
  std::string_view View(size_t at, size_t n) const {
    return std::string_view(reinterpret_cast<const char*>(p_.data() + at), n);
  }

  // A new value, charged; nullptr when the budget has no room (Push then says so).
  ValuePtr New(Value::Kind kind) {
    if (!budget_.Charge(kValueCost + (IsContainer(kind) ? kWorklistCost : 0))) return nullptr;
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  // None, the booleans, ints 0 to 255 and marks are one value however often the pickle makes
  // them: `Na` repeated costs a list slot per two bytes, not a value.
  ValuePtr Shared(ValuePtr& slot, Value::Kind kind, int64_t i) {
    if (slot == nullptr) {
      slot = New(kind);
      if (slot != nullptr) slot->i = i;
    }
    return slot;
  }
  // Room for `extra` more pointers in `v`, charged. The capacity at least doubles, so a vector
  // filled one at a time is charged under twice its final size, which covers the old and new
  // blocks both held while it moves.
  [[nodiscard]] bool Grow(std::vector<ValuePtr>& v, size_t extra) {
    if (extra <= v.capacity() - v.size()) return true;
    const size_t want = std::max(v.size() + extra, 2 * v.capacity());
    if (!budget_.Charge(Allocation(uint64_t(want) * sizeof(ValuePtr)))) return false;
    v.reserve(want);
    return true;
  }
  [[nodiscard]] absl::Status Push(ValuePtr v) {
    if (v == nullptr || !Grow(stack_, 1)) return OverBudget();
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  [[nodiscard]] absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::kMark) {
      return Bad("pops an empty stack");
    }
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  // The stack index below `at`, or past the stack's end where there is none (which Modifiable
  // refuses).
  size_t Below(size_t at) const { return at == 0 ? stack_.size() : at - 1; }
  // Where the topmost mark is on the stack.
  [[nodiscard]] absl::StatusOr<size_t> TopMark() const {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i]->kind == Value::Kind::kMark) return i;
    }
    return Bad("no mark");
  }
  [[nodiscard]] absl::Status PushString(uint64_t len) {
    if (!Need(len)) return Bad("string runs past the end");
    ValuePtr v = New(Value::Kind::kString);
    if (v != nullptr) v->s = View(pos_, len);
    pos_ += len;
    return Push(std::move(v));
  }
  [[nodiscard]] absl::Status PushInt(int64_t i) {
    if (i >= 0 && i < int64_t(small_ints_.size())) {
      return Push(Shared(small_ints_[size_t(i)], Value::Kind::kInt, i));
    }
    ValuePtr v = New(Value::Kind::kInt);
    if (v != nullptr) v->i = i;
    return Push(std::move(v));
  }
  [[nodiscard]] absl::Status Memo(uint64_t index) {
    if (stack_.empty()) return Bad("memoizes an empty stack");
    // The pickler numbers memo entries from 0, one a value, so an index past the entries the
    // budget could hold at all would only be reached by a memo it refuses: say so before
    // growing the memo towards it.
    if (index >= budget_.limit() / sizeof(ValuePtr)) {
      return Bad(StrCat("memo index ", index, " ", budget_.Exceeded()));
    }
    if (index >= memo_.size()) {
      if (!Grow(memo_, size_t(index) + 1 - memo_.size())) return OverBudget();
      memo_.resize(size_t(index) + 1);
    }
    if (memo_[index] == nullptr) ++memo_count_;
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status Get(uint64_t index) {
    if (index >= memo_.size() || memo_[index] == nullptr) return Bad("reads an unset memo slot");
    return Push(memo_[index]);
  }
  // Puts `child` into `parent`, a new tuple or tensor, or a list or dict being filled (see
  // Modifiable).
  [[nodiscard]] absl::Status Adopt(Value& parent, ValuePtr child) {
    if (child.get() == &parent) return Bad("puts a container inside itself");
    if (child->depth >= limits_.max_nesting) {
      return Bad(
          StrCat("nests containers more than ", limits_.max_nesting, " levels deep (the limit)"));
    }
    if (!Grow(parent.items, 1)) return OverBudget();
    parent.depth = std::max(parent.depth, child->depth + 1);
    child->nested = true;
    parent.items.push_back(std::move(child));
    return absl::OkStatus();
  }
  // Moves the values above the mark at `mark` into the container just below it, and drops the
  // mark; the caller has checked the container (Modifiable).
  [[nodiscard]] absl::Status Fill(size_t mark) {
    Value& container = *stack_[mark - 1];
    if (!Grow(container.items, stack_.size() - mark - 1)) return OverBudget();
    for (size_t i = mark + 1; i < stack_.size(); ++i) {
      if (absl::Status s = Adopt(container, std::move(stack_[i])); !s.ok()) return s;
    }
    stack_.resize(mark);
    return absl::OkStatus();
  }
  // Whether the list or dict at `at` on the stack may take more items. One already inside
  // another container is refused: the pickler fills each container before anything holds it,
  // so only a recursive structure (never part of a state_dict) would need it, and refusing it
  // keeps the values free of cycles (which shared_ptr would leak) and every recorded depth exact.
  [[nodiscard]] absl::Status Modifiable(size_t at, Value::Kind kind, std::string_view what) {
    if (at >= stack_.size() || stack_[at]->kind != kind) return Bad(what);
    if (stack_[at]->nested) return Bad("changes a container already inside another");
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status Reduce(const ValuePtr& callable, const ValuePtr& args);
  [[nodiscard]] absl::Status Step(uint8_t op);

  std::span<const std::byte> p_;
  const TorchSaveLimits limits_;
  MemoryBudget& budget_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<ValuePtr> memo_;  // by index; unset entries are null
  size_t memo_count_ = 0;       // entries set, where MEMOIZE puts the next
  ValuePtr none_, true_, false_, mark_;
  std::array<ValuePtr, 256> small_ints_;
};

absl::Status Unpickler::Reduce(const ValuePtr& callable, const ValuePtr& args) {
  if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple) {
    return Bad("calls something that is not a known function");
  }
  const std::vector<ValuePtr>& a = args->items;
  auto is = [](const ValuePtr& v, Value::Kind k) { return v->kind == k; };
  if (callable->s == "collections\nOrderedDict") return Push(New(Value::Kind::kDict));
  if (callable->s == "torch._utils\n_rebuild_tensor_v2") {
    if (a.size() < 4 || !is(a[0], Value::Kind::kStorage) || !is(a[1], Value::Kind::kInt) ||
        a[1]->i < 0) {
      return Bad("_rebuild_tensor_v2 with unexpected arguments");
    }
    if (!IsShape(*a[2]) || !IsShape(*a[3]) || a[2]->items.size() != a[3]->items.size()) {
      return Bad("a tensor's size and stride must be tuples of the same length");
    }
    ValuePtr t = New(Value::Kind::kTensor);
    if (t == nullptr || !Grow(t->items, 3)) return OverBudget();
    t->i = a[1]->i;  // storage offset, in elements
    for (int k : {0, 2, 3}) {
      if (absl::Status s = Adopt(*t, a[size_t(k)]); !s.ok()) return s;
    }
    return Push(std::move(t));
  }
  if (callable->s == "torch._utils\n_rebuild_parameter") {
    if (a.empty() || !is(a[0], Value::Kind::kTensor))
      return Bad("_rebuild_parameter without a tensor");
    return Push(a[0]);
  }
  return Bad(StrCat("refuses to call ", Dotted(callable->s), " (not part of a state_dict)"));
}

// Runs the opcode `op`, whose arguments follow it at pos_.
// One function: a switch over every pickle opcode reads best as one table.
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
      return Push(New(K::kDict));
    case ']':
      return Push(New(K::kList));
    case ')':
      return Push(New(K::kTuple));
    case '(':
      return Push(Shared(mark_, K::kMark, 0));
    case 'N':
      return Push(Shared(none_, K::kNone, 0));
    case 0x88:
      return Push(Shared(true_, K::kBool, 1));
    case 0x89:
      return Push(Shared(false_, K::kBool, 0));
    case 'X':  // BINUNICODE
    case 'T':  // BINSTRING
    case 'B':  // BINBYTES
      if (!Need(4)) return Bad("truncated");
      return PushString(U(4));
    case 'U':   // SHORT_BINSTRING
    case 'C':   // SHORT_BINBYTES
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
      ValuePtr v = New(K::kFloat);
      if (v != nullptr) std::memcpy(&v->i, &bits, 8);
      return Push(std::move(v));
    }
    case 'c': {  // GLOBAL "module\nname\n", kept as "module\nname"
      const size_t start = pos_;
      for (int part = 0; part < 2; ++part) {
        const size_t begin = pos_;
        while (pos_ < p_.size() && char(p_[pos_]) != '\n' && pos_ - begin < 256) ++pos_;
        if (pos_ >= p_.size() || char(p_[pos_]) != '\n') return Bad("broken GLOBAL");
        ++pos_;
      }
      ValuePtr v = New(K::kGlobal);
      if (v != nullptr) v->s = View(start, pos_ - 1 - start);
      return Push(std::move(v));
    }
    case 'q':
      if (!Need(1)) return Bad("truncated");
      return Memo(U(1));
    case 'r':
      if (!Need(4)) return Bad("truncated");
      return Memo(U(4));
    case 0x94:  // MEMOIZE
      return Memo(memo_count_);
    case 'h':
      if (!Need(1)) return Bad("truncated");
      return Get(U(1));
    case 'j':
      if (!Need(4)) return Bad("truncated");
      return Get(U(4));
    case 't': {
      absl::StatusOr<size_t> mark = TopMark();
      if (!mark.ok()) return mark.status();
      ValuePtr v = New(K::kTuple);
      if (v == nullptr || !Grow(v->items, stack_.size() - *mark - 1)) return OverBudget();
      for (size_t i = *mark + 1; i < stack_.size(); ++i) {
        if (absl::Status s = Adopt(*v, std::move(stack_[i])); !s.ok()) return s;
      }
      stack_.resize(*mark);
      return Push(std::move(v));
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
      ValuePtr v = New(K::kTuple);
      if (v == nullptr || !Grow(v->items, n)) return OverBudget();
      for (size_t i = 0; i < n; ++i) {
        if (absl::Status s = Adopt(*v, std::move(popped[i])); !s.ok()) return s;
      }
      return Push(std::move(v));
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
      if (!dtype) return Bad(StrCat("unsupported storage type ", Dotted(a[1]->s)));
      if (a[2]->s.size() > kMaxStorageKey) {
        return Bad(StrCat("a storage key longer than ", kMaxStorageKey, " bytes"));
      }
      ValuePtr v = New(K::kStorage);
      if (v != nullptr) {
        v->s = a[2]->s;
        v->i = int64_t(*dtype);
      }
      return Push(std::move(v));
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
      if (absl::Status s = Modifiable(Below(stack_.size()), K::kDict, "sets items on a non-dict");
          !s.ok()) {
        return s;
      }
      Value& dict = *stack_.back();
      if (absl::Status s = Adopt(dict, std::move(*key)); !s.ok()) return s;
      return Adopt(dict, std::move(*value));
    }
    case 'u': {
      absl::StatusOr<size_t> mark = TopMark();
      if (!mark.ok()) return mark.status();
      if ((stack_.size() - *mark - 1) % 2 != 0) return Bad("odd number of dict items");
      if (absl::Status s = Modifiable(Below(*mark), K::kDict, "sets items on a non-dict");
          !s.ok()) {
        return s;
      }
      return Fill(*mark);
    }
    case 'a': {
      absl::StatusOr<ValuePtr> value = Pop();
      if (!value.ok()) return value.status();
      if (absl::Status s = Modifiable(Below(stack_.size()), K::kList, "appends to a non-list");
          !s.ok()) {
        return s;
      }
      return Adopt(*stack_.back(), std::move(*value));
    }
    case 'e': {
      absl::StatusOr<size_t> mark = TopMark();
      if (!mark.ok()) return mark.status();
      if (absl::Status s = Modifiable(Below(*mark), K::kList, "appends to a non-list"); !s.ok()) {
        return s;
      }
      return Fill(*mark);
    }
    case 'b': {  // BUILD: state for the object below (a state_dict's _metadata): not needed
      absl::StatusOr<ValuePtr> state = Pop();
      if (!state.ok()) return state.status();
      if (stack_.empty() ||
          (stack_.back()->kind != K::kDict && stack_.back()->kind != K::kTensor)) {
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
  absl::StatusOr<std::map<std::string, ZipEntry>> zip = ReadZip(bytes, budget);
  if (!zip.ok()) return zip.status();
  std::string prefix;
  const ZipEntry* pickle = FindPickle(*zip, prefix);
  if (pickle == nullptr) return absl::InvalidArgumentError("not a torch.save file: no data.pkl");
  Unpickler unpickler(bytes.subspan(pickle->offset, pickle->size), limits, budget);
  absl::StatusOr<ValuePtr> root = unpickler.Run();
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
