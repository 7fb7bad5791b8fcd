// The torch.save reader on archives built here byte by byte (a stored zip around a protocol-2
// pickle, as torch.save writes them): the tensors it returns, and the precise refusals of what a
// hostile file could hold — sizes that overflow, views past their storage, expanded views, and
// callables other than a state_dict's.
#include "ckpt/torch_save_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace pillar::ckpt {
namespace {

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

// {name: _rebuild_tensor_v2(storage 0 of `kind`, offset, size, stride, False, OrderedDict())},
// `size` and `stride` already pickled as tuples.
std::string Pickle(const std::string& size, const std::string& stride,
                   const std::string& kind = "FloatStorage",
                   const std::string& offset = std::string("K\0", 2)) {
  return std::string("\x80\x02}") + Str("x") + "ctorch._utils\n_rebuild_tensor_v2\n((" +
         Str("storage") + "ctorch\n" + kind + "\n" + Str("0") + Str("cpu") + "K\x04tQ" + offset +
         size + stride + "\x89" + "ccollections\nOrderedDict\n)Rt" + "Rs.";
}

std::string Floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

absl::StatusOr<TorchSaveFile> Parse(const std::string& archive) {
  return ParseTorchSave(std::as_bytes(std::span(archive.data(), archive.size())));
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

}  // namespace
}  // namespace pillar::ckpt
