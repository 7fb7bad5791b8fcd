#include "common/strings.h"

#include <gtest/gtest.h>

namespace pillar {
namespace {

TEST(StringsTest, StrCatMixesTypes) {
  EXPECT_EQ(
      StrCat("a", std::string("b"), std::string_view("c"), 42, -1, 'x', absl::string_view("z")),
      "abc42-1xz");
}

// A name read from a file reaches a terminal as text (review helper-121: `pillar ckpt show`
// printed an entry's escape sequences as they were).
TEST(StringsTest, ForTerminalWritesControlBytesAsEscapes) {
  EXPECT_EQ(ForTerminal("fc1.weight"), "fc1.weight");
  EXPECT_EQ(ForTerminal("a\x1b]0;owned\x07"
                        "b\nc\x7f"),
            "a\\x1b]0;owned\\x07b\\x0ac\\x7f");
  EXPECT_EQ(ForTerminal("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 passes
}

TEST(StringsTest, ParseIntIsStrict) {
  int64_t v;
  EXPECT_TRUE(ParseInt("123", &v));
  EXPECT_EQ(v, 123);
  EXPECT_FALSE(ParseInt("12a", &v));
  EXPECT_FALSE(ParseInt("", &v));
  EXPECT_FALSE(ParseInt("99999999999999999999", &v));
  int8_t small;
  EXPECT_FALSE(ParseInt("300", &small));
}

TEST(StringsTest, SplitKeepsEmptyParts) {
  EXPECT_EQ(Split("/a//b", '/'), (std::vector<std::string_view>{"", "a", "", "b"}));
}

TEST(StringsTest, HexPads) {
  EXPECT_EQ(Hex(255, 4), "00ff");
  EXPECT_EQ(Hex(0x123456789, 4), "123456789");
}

TEST(StringsTest, EqualsIgnoreCase) {
  EXPECT_TRUE(EqualsIgnoreCase("Bearer ", "bEARER "));
  EXPECT_FALSE(EqualsIgnoreCase("Bearer", "Bearer "));
}

}  // namespace
}  // namespace pillar
