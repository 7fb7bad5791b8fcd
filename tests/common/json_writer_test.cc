#include "common/json_writer.h"

#include <gtest/gtest.h>

#include <limits>

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

}  // namespace
}  // namespace pillar
