#include <array>
#include <optional>

#include "ckpt/torch_save_parts.h"
#include "common/status_macros.h"

namespace pillar::ckpt::internal {

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

namespace {

// torch.save names storages "0", "1", ...: a longer key is no torch.save file, and each tensor's
// lookup of its storage copies the key.
constexpr size_t kMaxStorageKey = 256;

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

}  // namespace

[[nodiscard]] absl::StatusOr<ValuePtr> Unpickle(std::span<const std::byte> pickle,
                                                const TorchSaveLimits& limits,
                                                MemoryBudget& budget) {
  return Unpickler(pickle, limits, budget).Run();
}

}  // namespace pillar::ckpt::internal
