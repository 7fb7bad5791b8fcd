#include "common/toml_parse.h"

#include <gtest/gtest.h>

#include <string>

namespace pillar {
namespace {

// toml++ recurses on nesting: deep enough text overflowed the stack (found by a review with
// 50,000 dotted levels). Refused before it is parsed, with the line; nesting in strings and
// comments is not nesting.
TEST(TomlParseTest, NestingDeeperThanAnyConfigurationIsRefusedBeforeParsing) {
  std::string dotted = "[guard]\n";
  for (int i = 0; i < 50000; ++i) dotted += "a.";
  dotted += "a = 1\n";
  absl::StatusOr<toml::table> t = ParseToml(dotted, "deep.toml");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("deep.toml:2: nested more than"),
            std::string::npos)
      << t.status();
  EXPECT_FALSE(ParseToml("x = " + std::string(50000, '[') + std::string(50000, ']'), "t").ok());
  EXPECT_FALSE(ParseToml("x = " + std::string(200, '{'), "t").ok());
  // Fine: dots and brackets in strings and comments, a path, a float, ordinary tables.
  const std::string fine = "# " + std::string(500, '[') + "\n[a.b.c]\npath = \"" +
                           std::string(500, '.') + "\"\nlit = '" + std::string(300, '{') +
                           "'\nmulti = \"\"\"\n" + std::string(300, '.') + "\n\"\"\"\nf = 1.5\n" +
                           "list = [[1, 2], [3]]\n";
  std::string floats = "buckets = [";
  for (int i = 0; i < 300; ++i) floats += "0.5, ";
  floats += "1.5]\n";
  ASSERT_TRUE(ParseToml(floats, "floats.toml").ok()) << "a value may hold any number of floats";
  absl::StatusOr<toml::table> ok = ParseToml(fine, "fine.toml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at_path("a.b.c.f").value<double>(), 1.5);
}

}  // namespace
}  // namespace pillar
