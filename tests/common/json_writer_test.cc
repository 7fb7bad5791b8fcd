#include "common/json_writer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

namespace pillar {
namespace {

TEST(JsonWriterTest, WritesNestedStructureWithCommas) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a");
  w.Int(-3);
  w.Key("b");
  w.BeginArray();
  w.Bool(true);
  w.Null();
  w.Double(0.5);
  w.EndArray();
  w.Key("c");
  w.String("x");
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"a":-3,"b":[true,null,0.5],"c":"x"})");
}

TEST(JsonWriterTest, EscapesControlCharactersAndQuotes) {
  std::string out;
  AppendJsonString(out, std::string("a\"b\\c\n\x01", 7));
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001")");
}

// The writer scans plain text eight bytes at a time: every byte that must be escaped is found
// wherever it falls in a word, at either end of a word, and in the tail after the last one.
TEST(JsonWriterTest, EscapesEveryByteWhereverItFallsInALongString) {
  const std::string plain = "abcdefghijklmnopqrstuvwxyz0123";
  const std::pair<char, std::string> specials[] = {
      {'"', "\\\""},       {'\\', "\\\\"}, {'\n', "\\n"}, {'\x1f', "\\u001f"},
      {'\x00', "\\u0000"}, {' ', " "},     {'~', "~"},    {'\x7f', "\x7f"}};
  for (const auto& [byte, escaped] : specials) {
    for (size_t at = 0; at < plain.size(); ++at) {
      std::string text = plain;
      text[at] = byte;
      std::string out;
      AppendJsonString(out, text);
      EXPECT_EQ(out, "\"" + plain.substr(0, at) + escaped + plain.substr(at + 1) + "\"")
          << "byte " << int(byte) << " at " << at;
    }
  }
  // A byte with its high bit set, valid or not as UTF-8, at every position.
  for (size_t at = 0; at + 2 <= plain.size(); ++at) {
    std::string text = plain;
    text.replace(at, 2, "\xc3\xa9");  // é
    std::string out;
    AppendJsonString(out, text);
    EXPECT_EQ(out, "\"" + text + "\"");
    text[at + 1] = 'x';  // a lead byte without its continuation
    out.clear();
    AppendJsonString(out, text);
    EXPECT_EQ(out, "\"" + plain.substr(0, at) + "\xef\xbf\xbdx" + plain.substr(at + 2) + "\"");
  }
}

// Text shorter than a word, and the last partial word of longer text, are read a byte at a time:
// every length around a word's size, a special byte at every position, and a second byte after
// it (a word read after an escaped '"' must not take the '#' after it, a borrow's neighbour, for
// special).
TEST(JsonWriterTest, EscapesEveryByteInTextOfEveryLengthAroundAWord) {
  for (size_t length = 0; length <= 25; ++length) {
    const std::string plain = std::string("abcdefghijklmnopqrstuvwxyz").substr(0, length);
    std::string out;
    AppendJsonString(out, plain);
    EXPECT_EQ(out, "\"" + plain + "\"");
    for (size_t at = 0; at < length; ++at) {
      std::string text = plain;
      text[at] = '"';
      out.clear();
      AppendJsonString(out, text);
      EXPECT_EQ(out, "\"" + plain.substr(0, at) + "\\\"" + plain.substr(at + 1) + "\"")
          << "length " << length << ", at " << at;
      for (size_t second = at + 1; second < length; ++second) {
        for (const char next : {'#', '!', '\n'}) {
          std::string two = text;
          two[second] = next;
          std::string expected = "\"" + plain.substr(0, at) + "\\\"";
          expected += plain.substr(at + 1, second - at - 1);
          expected += next == '\n' ? std::string("\\n") : std::string(1, next);
          expected += plain.substr(second + 1) + "\"";
          out.clear();
          AppendJsonString(out, two);
          EXPECT_EQ(out, expected) << "length " << length << ", at " << at << ", " << second;
        }
      }
    }
  }
}

// Thousandths writes the decimal that reads back as value / 1000.0, which is the text Double
// writes whenever Double does not choose scientific form and the value is exact in a double
// (beyond 2^53 Thousandths is the more precise).
TEST(JsonWriterTest, ThousandthsWriteTheDecimalThatReadsBackAsTheQuotient) {
  auto check = [](int64_t value) {
    JsonWriter exact, shortest;
    exact.Thousandths(value);
    shortest.Double(double(value) / 1e3);
    EXPECT_EQ(std::strtod(exact.str().c_str(), nullptr), double(value) / 1e3) << value;
    EXPECT_EQ(exact.str().find_first_of("e+"), std::string::npos) << exact.str();
    const bool exact_in_double = value > -(int64_t(1) << 53) && value < (int64_t(1) << 53);
    if (exact_in_double && shortest.str().find('e') == std::string::npos) {
      EXPECT_EQ(exact.str(), shortest.str()) << value;
    }
  };
  for (int64_t value :
       {int64_t(0), int64_t(1), int64_t(10), int64_t(999), int64_t(1000), int64_t(1001),
        int64_t(12500), int64_t(-1), int64_t(-12500), int64_t(100'000'000),
        int64_t(86'400'000'000'000), int64_t(1) << 52, -(int64_t(1) << 52),
        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    check(value);
  }
  JsonWriter w;
  w.Thousandths(12500);
  w.Thousandths(-3000);
  w.Thousandths(7);
  EXPECT_EQ(w.str(), "12.5,-3,0.007");
  for (int64_t value = -2000; value <= 200000; value += 7) check(value);
}

TEST(JsonWriterTest, ReplacesInvalidUtf8SoOutputIsAlwaysValid) {
  std::string out;
  AppendJsonString(
      out, "ok\xff\xc3(\xe2\x82\xac");  // bad byte, truncated sequence, then a valid euro sign
  EXPECT_EQ(out, "\"ok\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac\"");
  out.clear();
  AppendJsonString(out, "\xed\xa0\x80");  // an encoded surrogate is not valid UTF-8
  EXPECT_EQ(out, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
}

TEST(JsonWriterTest, NonFiniteNumbersBecomeNull) {
  JsonWriter w;
  w.BeginArray();
  w.Double(std::numeric_limits<double>::infinity());
  w.Float(std::numeric_limits<float>::quiet_NaN());
  w.Float(1.5f);
  w.EndArray();
  EXPECT_EQ(w.str(), "[null,null,1.5]");
}

TEST(JsonWriterTest, LargeIntegralFloatsAreWrittenSoA64BitReaderAcceptsThem) {
  // Found by the infer_reply fuzzer: to_chars wrote 1.1111111111121111e20 as a 21-digit integer,
  // which simdjson (and so pillar's own decoder) refuses.
  JsonWriter w;
  w.BeginArray();
  w.Double(1.111111111112111e20);
  w.Double(-1e19);
  w.Float(3e30f);
  w.Double(123456789012345678.0);  // 18 digits: still an integer that fits
  w.Double(1e15);                  // shorter in scientific form already
  w.EndArray();
  EXPECT_EQ(w.str(), "[1.111111111112111e+20,-1e+19,3e+30,123456789012345680,1e+15]");
}

TEST(JsonWriterTest, NegativeZeroIsWrittenSoItReadsBackNegative) {
  // "-0" is an integer in JSON's grammar: simdjson and Python's json read it as 0.
  JsonWriter w;
  w.BeginArray();
  w.Float(-0.0f);
  w.Double(-0.0);
  w.Float(0.0f);
  w.Double(-1e-300 * 1e-300);  // underflows to -0.0
  w.EndArray();
  EXPECT_EQ(w.str(), "[-0.0,-0.0,0,-0.0]");
}

}  // namespace
}  // namespace pillar
