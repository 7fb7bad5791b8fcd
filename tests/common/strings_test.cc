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
  // C1 controls (U+009B is CSI to some terminals) and bidirectional controls (review helper-127).
  EXPECT_EQ(ForTerminal("a\xc2\x9b"
                        "2Jb\xe2\x80\xaegnp.exe\xe2\x81\xa6\xd8\x9c"),
            "a\\u009b2Jb\\u202egnp.exe\\u2066\\u061c");
  EXPECT_EQ(ForTerminal("\xc2\xa0\xe2\x80\x94\xe2\x82\xac"), "\xc2\xa0\xe2\x80\x94\xe2\x82\xac");
  EXPECT_EQ(ForTerminal("\xe2\x80"), "\xe2\x80");  // cut short: passed as it is
}

TEST(StringsTest, CutForLogNeverEndsInsideAToken) {
  EXPECT_EQ(CutForLog("short", 10), "short");
  EXPECT_EQ(CutForLog("/v2/models/abc", 14), "/v2/models/abc");  // whole: nothing cut
  EXPECT_EQ(CutForLog("/v2/models/abcdef", 14), "/v2/models/");  // inside "abcdef": all of it
  EXPECT_EQ(CutForLog("?a=1&key=pk_12_secret", 19), "?a=1&");    // the run back to '&'
  EXPECT_EQ(CutForLog("abc/def", 3), "abc");                     // at a boundary: kept
  EXPECT_EQ(CutForLog(std::string(100, 'x'), 50), "");
  EXPECT_EQ(CutForLog("/x/alice.person@example.com", 22), "/x/");  // an address whole or not at all
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
