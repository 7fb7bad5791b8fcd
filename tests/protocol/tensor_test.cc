#include "protocol/tensor.h"

#include <gtest/gtest.h>

namespace pillar::protocol {
namespace {

Tensor Bytes(std::vector<int64_t> shape, const std::vector<std::string>& elements) {
  Tensor t{.name = "t", .datatype = DataType::kBytes, .shape = std::move(shape), .data = ""};
  for (const std::string& e : elements) AppendBytesElement(t.data, e);
  return t;
}

TEST(TensorTest, BytesElementsAreLengthPrefixedLittleEndian) {
  std::string data;
  AppendBytesElement(data, "hi");
  AppendBytesElement(data, "");
  EXPECT_EQ(data, std::string("\x02\x00\x00\x00hi\x00\x00\x00\x00", 10));
  std::string big(300, 'x');
  data.clear();
  AppendBytesElement(data, big);
  EXPECT_EQ(data.substr(0, 4), std::string("\x2c\x01\x00\x00", 4));
}

TEST(TensorTest, MalformedBytesDataIsRefusedNotReadPast) {
  std::vector<std::string> seen;
  auto collect = [&](std::string_view e) {
    seen.emplace_back(e);
    return true;
  };
  // A length that runs past the end, a length cut in two, a length of 4 GiB - 1.
  EXPECT_FALSE(ForEachBytesElement(std::string("\x05\x00\x00\x00"
                                               "abc",
                                               7),
                                   collect));
  EXPECT_FALSE(ForEachBytesElement(std::string("\x01\x00\x00\x00"
                                               "a"
                                               "\x01\x00",
                                               7),
                                   collect));
  EXPECT_FALSE(ForEachBytesElement(std::string("\xff\xff\xff\xff", 4), collect));
  EXPECT_EQ(seen, std::vector<std::string>{"a"});
  EXPECT_TRUE(ForEachBytesElement("", collect));

  Tensor t = Bytes({3}, {"a", "bc", ""});
  EXPECT_TRUE(t.DataFillsShape());
  t.shape = {2};
  EXPECT_FALSE(t.DataFillsShape());  // three elements where the shape says two
  t.shape = {3};
  t.data.pop_back();
  EXPECT_FALSE(t.DataFillsShape());
}

TEST(TensorTest, ElementRangesAreByElementsForEveryDatatype) {
  const Tensor t = Bytes({2, 2}, {"a", "bcd", "", "ef"});
  auto row1 = ElementRange(t, 2, 2);
  ASSERT_TRUE(row1.has_value());
  EXPECT_EQ(t.data.substr(row1->first, row1->second - row1->first),
            std::string("\x00\x00\x00\x00\x02\x00\x00\x00"
                        "ef",
                        10));
  auto none = ElementRange(t, 1, 0);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->first, none->second);
  EXPECT_FALSE(ElementRange(t, 3, 2).has_value());
  EXPECT_FALSE(ElementRange(t, -1, 1).has_value());

  Tensor f{.name = "f", .datatype = DataType::kFp32, .shape = {4}, .data = std::string(16, '\0')};
  auto r = ElementRange(f, 1, 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, std::make_pair(size_t(4), size_t(12)));
  f.data.resize(8);  // data that does not fill its shape
  EXPECT_FALSE(ElementRange(f, 1, 2).has_value());
}

}  // namespace
}  // namespace pillar::protocol
