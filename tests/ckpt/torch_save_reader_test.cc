// The torch.save reader on archives built here byte by byte (a stored zip around a protocol-2
// pickle, as torch.save writes them): the tensors it returns, and the precise refusals of what a
// hostile file could hold — sizes that overflow, views past their storage, expanded views,
// callables other than a state_dict's, nesting that would exhaust the stack, and references
// that would multiply a small file into gigabytes.
#include "ckpt/torch_save_reader.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "testing/server_process.h"

namespace pillar::ckpt {
namespace {

using namespace std::string_literals;

void Put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((v >> (8 * i)) & 0xff);
}

// A zip archive of stored entries.
std::string Zip(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out, directory;
  for (const auto& [name, data] : files) {
    const uint64_t offset = out.size();
    Put(out, 0x04034b50, 4);
    Put(out, 20, 2);
    Put(out, 0, 2);  // flags
    Put(out, 0, 2);  // stored
    Put(out, 0, 4);  // time, date
    Put(out, 0, 4);  // crc (not checked)
    Put(out, data.size(), 4);
    Put(out, data.size(), 4);
    Put(out, name.size(), 2);
    Put(out, 0, 2);
    out += name + data;
    Put(directory, 0x02014b50, 4);
    Put(directory, 20, 2);
    Put(directory, 20, 2);
    Put(directory, 0, 2);
    Put(directory, 0, 2);
    Put(directory, 0, 4);
    Put(directory, 0, 4);
    Put(directory, data.size(), 4);
    Put(directory, data.size(), 4);
    Put(directory, name.size(), 2);
    Put(directory, 0, 2);
    Put(directory, 0, 2);
    Put(directory, 0, 2);
    Put(directory, 0, 2);
    Put(directory, 0, 4);
    Put(directory, offset, 4);
    directory += name;
  }
  const uint64_t at = out.size();
  out += directory;
  Put(out, 0x06054b50, 4);
  Put(out, 0, 4);
  Put(out, files.size(), 2);
  Put(out, files.size(), 2);
  Put(out, directory.size(), 4);
  Put(out, at, 4);
  Put(out, 0, 2);
  return out;
}

std::string Str(const std::string& s) {  // BINUNICODE
  std::string out = "X";
  Put(out, s.size(), 4);
  return out + s;
}

// _rebuild_tensor_v2(storage `key` of `kind`, offset, size, stride, False, OrderedDict()), left on
// the stack; `size` and `stride` already pickled as tuples.
std::string Tensor(const std::string& size, const std::string& stride,
                   const std::string& kind = "FloatStorage",
                   const std::string& offset = std::string("K\0", 2),
                   const std::string& key = "0") {
  return "ctorch._utils\n_rebuild_tensor_v2\n((" + Str("storage") + "ctorch\n" + kind + "\n" +
         Str(key) + Str("cpu") + "K\x04tQ" + offset + size + stride + "\x89" +
         "ccollections\nOrderedDict\n)Rt" + "R";
}

// {"x": Tensor(...)}.
std::string Pickle(const std::string& size, const std::string& stride,
                   const std::string& kind = "FloatStorage",
                   const std::string& offset = std::string("K\0", 2)) {
  return std::string("\x80\x02}") + Str("x") + Tensor(size, stride, kind, offset) + "s.";
}

std::string Int(int32_t v) {  // BININT
  std::string out = "J";
  Put(out, uint32_t(v), 4);
  return out;
}

std::string Pair(int32_t a, int32_t b) { return Int(a) + Int(b) + "\x86"; }  // TUPLE2

std::string Floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

absl::StatusOr<TorchSaveFile> Parse(const std::string& archive,
                                    const TorchSaveLimits& limits = {}) {
  return ParseTorchSave(std::as_bytes(std::span(archive.data(), archive.size())), limits);
}

std::string Archive(const std::string& pickle) {
  return Zip({{"m/data.pkl", pickle}, {"m/data/0", Floats({1, 2, 3, 4})}});
}

std::vector<float> Values(const TorchSaveTensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

TEST(TorchSaveReaderTest, ReadsATensorAndGathersAStridedView) {
  std::string archive = Archive(Pickle("K\x04\x85", "K\x01\x85"));  // (4,), (1,)
  auto file = Parse(archive);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].name, "x");
  EXPECT_EQ(file->tensors[0].shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(Values(file->tensors[0]), (std::vector<float>{1, 2, 3, 4}));
  // The transpose of [[1, 2], [3, 4]]: size (2, 2), stride (1, 2).
  archive = Archive(Pickle("K\x02K\x02\x86", "K\x01K\x02\x86"));
  file = Parse(archive);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(Values(file->tensors[0]), (std::vector<float>{1, 3, 2, 4}));
}

TEST(TorchSaveReaderTest, HostileSizesAndViewsAreRefusedWithTheirReason) {
  struct Case {
    std::string pickle, expected;
  };
  const std::string huge = std::string("\x8a\x08") + std::string(7, '\xff') + '\x0f';
  const Case cases[] = {
      // Sizes whose product overflows 64 bits.
      {Pickle("(" + huge + huge + "t", "K\x01K\x01\x86"), "size too large"},
      // A view that reaches past the storage's 4 elements.
      {Pickle("K\x05\x85", "K\x01\x85"), "reaches past its storage"},
      {Pickle("K\x04\x85", "K\x01\x85", "FloatStorage", "K\x01"), "reaches past its storage"},
      // An expanded view: 1,000 elements over a 4-element storage.
      {Pickle("M\xe8\x03\x85", std::string("K\0\x85", 3)), "expanded view"},
      {Pickle("K\x04\x85", "K\x01\x85", "ObjectStorage"), "unsupported storage type"},
      // torch.save's keys are "0", "1", ...: a long one would be copied into every reference.
      {std::string("\x80\x02}") + Str("x") +
           Tensor("K\x04\x85", "K\x01\x85", "FloatStorage", std::string("K\0", 2),
                  std::string(300, '7')) +
           "s.",
       "storage key longer than 256 bytes"},
  };
  for (const Case& c : cases) {
    auto file = Parse(Archive(c.pickle));
    ASSERT_FALSE(file.ok());
    EXPECT_NE(file.status().message().find(c.expected), std::string::npos) << file.status();
  }
}

TEST(TorchSaveReaderTest, NothingButAStateDictsObjectsIsEverCalled) {
  const std::string pickle = std::string("\x80\x02") + "cos\nsystem\n" + Str("true") + "\x85R.";
  auto file = Parse(Zip({{"m/data.pkl", pickle}}));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("refuses to call os.system"), std::string::npos)
      << file.status();
  EXPECT_FALSE(Parse("not a zip at all, just some bytes that are long enough").ok());
  EXPECT_FALSE(Parse(Zip({{"m/other", "x"}})).ok());  // no data.pkl
}

// Runs `parse` on a thread with a 1 MiB stack, an eighth of a usual main thread's, so that work
// recursing once per level of nesting crashes here whatever the host's `ulimit -s`.
absl::StatusOr<TorchSaveFile> OnSmallStack(
    const std::function<absl::StatusOr<TorchSaveFile>()>& parse) {
  struct Call {
    const std::function<absl::StatusOr<TorchSaveFile>()>* parse;
    absl::StatusOr<TorchSaveFile> result;
  } call{&parse, absl::UnknownError("not run")};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        Call* c = static_cast<Call*>(arg);
        c->result = (*c->parse)();
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (rc != 0) return absl::InternalError("pthread_create failed");
  pthread_join(thread, nullptr);
  return std::move(call.result);
}

// The growth of the process's peak resident memory over a scope. Linux keeps the peak (VmHWM)
// and resets it on a write of "5" to clear_refs; where that is not allowed, Growth() is 0 and
// the test says so rather than failing. Free heap pages are first handed back, so that what
// earlier tests freed is not reused unseen.
class PeakMemory {
 public:
  PeakMemory() {
    malloc_trim(0);
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    supported_ = bool(clear);
    start_ = Read("VmRSS:");
  }
  uint64_t Growth() const {
    if (!supported_) {
      std::printf("peak memory not measurable here (/proc/self/clear_refs not writable)\n");
      return 0;
    }
    const uint64_t peak = Read("VmHWM:");
    return peak > start_ ? peak - start_ : 0;
  }

 private:
  static uint64_t Read(const std::string& field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
    }
    return 0;
  }
  bool supported_ = false;
  uint64_t start_ = 0;
};

constexpr uint64_t kMiB = 1 << 20;

// The first finding of the review: a million nested lists in 2 MB of pickle. The old reader built
// them all and overflowed the stack freeing them, one recursive destructor call per level.
TEST(TorchSaveReaderTest, AMillionNestedListsFailCleanlyWithBoundedMemory) {
  const int kLevels = 1'000'000;
  const std::string archive =
      Archive("\x80\x02" + std::string(kLevels, ']') + std::string(kLevels - 1, 'a') + ".");
  const PeakMemory memory;
  auto file = OnSmallStack([&] { return Parse(archive); });
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("more than 100000 values on its stack (the limit)"),
            std::string::npos)
      << file.status();
  // The stack limit stops it a tenth of the way in: a few tens of MB, not the 200 MB or more a
  // million values take.
  EXPECT_LT(memory.Growth(), 64 * kMiB);
}

// Nesting is counted whatever builds it — lists, tuples, dicts — and refused one level past the
// limit, with the limit in the message; the deepest allowed structure passes that check (and
// fails later only for not being a state_dict).
TEST(TorchSaveReaderTest, NestingPastTheLimitIsRefusedNamingIt) {
  auto lists = [](int levels) {
    return Archive("\x80\x02" + std::string(levels, ']') + std::string(levels - 1, 'a') + ".");
  };
  auto tuples = [](int levels) {
    return Archive("\x80\x02" + std::string(levels, '(') + std::string(levels, 't') + ".");
  };
  auto dicts = [](int levels) {  // {0: {0: ... {}}}, keys and dicts interleaved on the stack
    std::string p = "\x80\x02";
    for (int i = 1; i < levels; ++i) p += std::string("}K\0", 3);
    return Archive(p + "}" + std::string(levels - 1, 's') + ".");
  };
  for (const auto& build : {std::function<std::string(int)>(lists), {tuples}, {dicts}}) {
    auto file = OnSmallStack([&] { return Parse(build(1001)); });
    ASSERT_FALSE(file.ok());
    EXPECT_NE(file.status().message().find("more than 1000 levels deep (the limit)"),
              std::string::npos)
        << file.status();
    file = OnSmallStack([&] { return Parse(build(1000)); });
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().message().find("levels deep"), std::string::npos) << file.status();
  }
  // A lower limit, set by the caller, is the one named.
  auto file = Parse(lists(11), {.max_nesting = 10});
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("more than 10 levels deep"), std::string::npos)
      << file.status();
}

// A container put inside itself, directly or through another, has no depth: it is refused
// rather than counted (or leaked, as shared_ptr cycles would be).
TEST(TorchSaveReaderTest, RecursiveStructuresAreRefused) {
  struct Case {
    std::string pickle, expected;
  };
  const Case cases[] = {
      // l = []; l.append(l)
      {"\x80\x02]q\0h\0a."s, "puts a container inside itself"},
      // a = []; b = []; b.append(a); a.append(b)
      {"\x80\x02]q\0]q\1h\0ah\0h\1a."s, "changes a container already inside"},
      // d = {}; d[0] = d
      {"\x80\x02}q\0K\0h\0s."s, "puts a container inside itself"},
  };
  for (const Case& c : cases) {
    auto file = Parse(Archive(c.pickle));
    ASSERT_FALSE(file.ok());
    EXPECT_NE(file.status().message().find(c.expected), std::string::npos) << file.status();
  }
}

// With the nesting, stack and memory limits lifted, the million nested lists are built in full:
// freeing them must not recurse once per level, on a 1 MiB stack as on any other.
TEST(TorchSaveReaderTest, FreeingAMillionNestedListsDoesNotRecurse) {
  const int kLevels = 1'000'000;
  const std::string archive =
      Archive("\x80\x02" + std::string(kLevels, ']') + std::string(kLevels - 1, 'a') + ".");
  auto file = OnSmallStack([&] {
    return Parse(archive,
                 {.max_nesting = 2 * kLevels, .max_stack = 2 * kLevels, .min_pickle_bytes = ~0ull});
  });
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("no dict of tensors"), std::string::npos) << file.status();
}

// The pickle machine's memory budget as documented: max(64 MiB, 16 x the file's size) for the
// zip directory and the pickle's values, slots and memo; the result's copies, names and shapes
// may add twice the file's size.
uint64_t PickleBudget(size_t file_size) { return std::max<uint64_t>(64 * kMiB, 16 * file_size); }
uint64_t DocumentedBound(size_t file_size) { return PickleBudget(file_size) + 2 * file_size; }

// The security review's amplification: `[None, None, ...]` built from 10 MB of pickle, five
// million appends of two bytes each. The old reader made a value for every None and reached
// 1.24 GB; every None is now the same value, and the list's slots alone pass the budget.
TEST(TorchSaveReaderTest, FiveMillionAppendedNonesAreRefusedWithinTheBudget) {
  std::string pickle = "\x80\x02]";
  for (int i = 0; i < 5'000'000; ++i) pickle += "Na";
  const std::string archive = Archive(pickle + ".");
  const PeakMemory memory;
  auto file = Parse(archive);
  EXPECT_LT(memory.Growth(), PickleBudget(archive.size()));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("bytes of memory (the limit: 16 times the file's size"),
            std::string::npos)
      << file.status();
}

// Its second: ten million MEMOIZE opcodes after one empty dict, one byte each. The old reader
// kept a map node for each (794 MB) and then imported nothing; memo entries are charged too.
TEST(TorchSaveReaderTest, TenMillionMemoEntriesAreRefusedWithinTheBudget) {
  const std::string archive = Archive("\x80\x02}" + std::string(10'000'000, '\x94') + ".");
  const PeakMemory memory;
  auto file = Parse(archive);
  EXPECT_LT(memory.Growth(), PickleBudget(archive.size()));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("bytes of memory (the limit: 16 times the file's size"),
            std::string::npos)
      << file.status();
}

// The memo is indexed as the pickler numbers it, from 0 up, so an index past the entries the
// budget could hold (4 Mi for this small file's 64 MiB) is refused before the memo is grown to
// it. The old reader took any index up to 100 million.
TEST(TorchSaveReaderTest, AMemoIndexPastTheBudgetIsRefused) {
  const std::string archive = Archive("\x80\x02}r\x80\xf0\xfa\x02."s);  // BINPUT 50,000,000
  const PeakMemory memory;
  auto file = Parse(archive);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("memo index 50000000 would take more than"),
            std::string::npos)
      << file.status();
  EXPECT_NE(file.status().message().find("(the limit: 16 times the file's size"), std::string::npos)
      << file.status();
  EXPECT_LT(memory.Growth(), PickleBudget(archive.size()));
}

// What torch.save writes (protocol 2, memo puts and gets, the _metadata dict, SETITEMS in
// batches of 1,000) for a state_dict of `count` one-element tensors, each in its own module:
// the most values and memo entries per byte of file a real state_dict makes, since every
// tensor's data is as small as it can be.
std::string ManyTinyTensors(int count) {
  std::string p = "\x80\x02";
  int memo = 0;
  auto put = [&] {
    std::string out;
    if (memo < 256) {
      out = "q";
      Put(out, memo, 1);
    } else {
      out = "r";
      Put(out, memo, 4);
    }
    ++memo;
    return out;
  };
  auto get = [](int index) {
    std::string out = "j";
    Put(out, index, 4);
    return out;
  };
  // Each put() in its own statement: the operands of one `+` chain may be evaluated in any order.
  p += "ccollections\nOrderedDict\n";
  p += put();  // memo 0
  p += ")R";
  p += put();
  p += "(";
  int rebuild = -1, storage = -1, floats = -1, cpu = -1;
  std::vector<std::pair<std::string, std::string>> files;
  for (int k = 0; k < count; ++k) {
    if (k > 0 && k % 1000 == 0) p += "u(";
    p += Str("layers." + std::to_string(k) + ".scale");
    p += put();
    if (rebuild < 0) {
      p += "ctorch._utils\n_rebuild_tensor_v2\n";
      rebuild = memo;
      p += put();
    } else {
      p += get(rebuild);
    }
    p += "((";
    if (storage < 0) {
      p += Str("storage");
      storage = memo;
      p += put();
      p += "ctorch\nFloatStorage\n";
      floats = memo;
      p += put();
    } else {
      p += get(storage) + get(floats);
    }
    p += Str(std::to_string(k));
    p += put();
    if (cpu < 0) {
      p += Str("cpu");
      cpu = memo;
      p += put();
    } else {
      p += get(cpu);
    }
    // The persistent id, offset 0, size (1,), stride (1,), not requiring grad, no hooks.
    for (const std::string& op :
         {"K\x01t"s, "QK\x00K\x01\x85"s, "K\x01\x85"s, "\x89"s + get(0) + ")R", "t"s, "R"s}) {
      p += op;
      p += put();
    }
    files.push_back({"m/data/" + std::to_string(k), Floats({float(k)})});
  }
  // state_dict._metadata: {"": {"version": 1}, "layers.0": {"version": 1}, ...}.
  for (const std::string& op : {"u}"s, Str("_metadata"), get(0) + ")R", "(" + Str(""), "}"s}) {
    p += op;
    p += put();
  }
  p += Str("version");
  const int version = memo;
  p += put();
  p += "K\x01s";
  for (int k = 0; k < count; ++k) {
    if (k % 1000 == 999) p += "u(";
    p += Str("layers." + std::to_string(k));
    p += put();
    p += "}";
    p += put();
    p += get(version) + "K\x01s";
  }
  p += "usb.";
  files.insert(files.begin(), {"m/data.pkl", p});
  return Zip(files);
}

// The budget leaves real state_dicts alone: the seed torch.save itself wrote, and 50,000 tensors
// of one element each (a 14 MB file, past where the 64 MiB floor decides), read in full within
// the documented bound.
TEST(TorchSaveReaderTest, RealStateDictsFitTheBudget) {
  auto seed = ReadTorchSave(
      (testing::SourceDir() / "tests/fuzz/corpus/torch_save/linear_state_dict").string());
  ASSERT_TRUE(seed.ok()) << seed.status();
  ASSERT_EQ(seed->tensors.size(), 2u);
  EXPECT_EQ(seed->tensors[0].name, "weight");
  EXPECT_EQ(seed->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(seed->tensors[1].name, "bias");

  const int kTensors = 50'000;
  const std::string archive = ManyTinyTensors(kTensors);
  ASSERT_GT(16 * archive.size(), 64 * kMiB) << "the floor, not the per-byte budget, would decide";
  const PeakMemory memory;
  auto file = Parse(archive);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), size_t(kTensors));
  EXPECT_EQ(file->tensors[kTensors - 1].name, "layers.49999.scale");
  EXPECT_EQ(Values(file->tensors[kTensors - 1]), (std::vector<float>{49999}));
  EXPECT_LT(memory.Growth(), DocumentedBound(archive.size()));
}

// One 4 MiB storage of floats 0, 1, 2, ..., and 4,000 tensors that are all its transpose: 2,000
// rebuilt one by one, 2,000 more by reference to the first (pickle memo), as a hostile file or a
// model tying one weight to many names might hold them.
std::string FourThousandTransposes(int distinct_views) {
  std::string storage(4 * kMiB, '\0');
  for (uint32_t i = 0; i < kMiB; ++i) {
    const float v = float(i);
    std::memcpy(storage.data() + 4 * i, &v, 4);
  }
  std::string pickle = "\x80\x02}(";
  for (int k = 0; k < 4000; ++k) {
    pickle += Str("w" + std::to_string(k));
    if (k < 2000) {
      // Views 0 .. distinct_views - 1 drop that many rows; the rest are all the full transpose.
      const int rows = 1024 - (k < distinct_views ? k : 0);
      pickle += Tensor(Pair(rows, 1024), Pair(1, 1024));
      if (k == 0) pickle += std::string("q\x01", 2);
    } else {
      pickle += std::string("h\x01", 2);
    }
  }
  return Zip({{"m/data.pkl", pickle + "u."}, {"m/data/0", storage}});
}

// The second finding of the review: a 4.5 MB file naming one 4 MiB strided view 4,000 times, which
// the old reader copied 4,000 times (16 GB). The view is gathered once and shared.
TEST(TorchSaveReaderTest, OneStridedViewNamedFourThousandTimesIsCopiedOnce) {
  const std::string archive = FourThousandTransposes(1);
  const PeakMemory memory;
  auto file = Parse(archive);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 4000u);
  const std::byte* copy = file->tensors[0].data.data();
  for (const TorchSaveTensor& t : file->tensors) {
    ASSERT_EQ(t.shape, (std::vector<int64_t>{1024, 1024})) << t.name;
    ASSERT_EQ(t.data.data(), copy) << t.name;
    ASSERT_EQ(t.data.size(), 4 * kMiB) << t.name;
  }
  // Element (r, c) of the transpose is storage element r + 1024 c.
  float v[3];
  std::memcpy(&v[0], copy + 4 * (0 * 1024 + 1), 4);  // (0, 1)
  std::memcpy(&v[1], copy + 4 * (1 * 1024 + 0), 4);  // (1, 0)
  std::memcpy(&v[2], copy + 4 * (5 * 1024 + 7), 4);  // (5, 7)
  EXPECT_EQ(v[0], 1024.0f);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[2], 5.0f + 7 * 1024);
  EXPECT_LT(memory.Growth(), 64 * kMiB);  // one copy and 4,000 small records
}

// The same file with 100 slightly different views (each of a few rows fewer) cannot be shared:
// the copies count against the cap, twice the file's size, and pass it on the third view.
TEST(TorchSaveReaderTest, DistinctStridedViewsPastTheCapAreRefused) {
  const std::string archive = FourThousandTransposes(100);
  const PeakMemory memory;
  auto file = Parse(archive);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("tensor 'w2': "), std::string::npos) << file.status();
  EXPECT_NE(file.status().message().find(" bytes, 2 times the file's size (the limit)"),
            std::string::npos)
      << file.status();
  EXPECT_LT(memory.Growth(), 64 * kMiB);  // two copies, not the old reader's 4,000 (16 GB)
}

// Names are copied into the result too: one 64 KiB name given to a thousand tensors by memo (two
// bytes a reference) would be 64 MB from a file of 70 KB.
TEST(TorchSaveReaderTest, ALongNameNamingManyTensorsCountsAgainstTheCap) {
  std::string pickle = "\x80\x02}(" + Str(std::string(64 * 1024, 'n')) + std::string("q\x02", 2) +
                       Tensor("K\x04\x85", "K\x01\x85") + std::string("q\x01", 2);
  for (int k = 1; k < 1000; ++k) pickle += std::string("h\x02h\x01", 4);
  auto file = Parse(Archive(pickle + "u."));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("times the file's size (the limit)"), std::string::npos)
      << file.status();
  // The name is shortened in the message.
  EXPECT_LT(file.status().message().size(), 1000u);
}

}  // namespace
}  // namespace pillar::ckpt
