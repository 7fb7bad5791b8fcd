// The source rules hold on src/ (every fallible function [[nodiscard]], no function over 80
// lines without a reason), and each check is shown failing on planted text.
#include "rules/source_rules.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

namespace pillar::rules {
namespace {

std::filesystem::path SourceRoot() {
  const char* root = std::getenv("PILLAR_SOURCE_DIR");
  return std::filesystem::path(root == nullptr ? "." : root) / "src";
}

TEST(SourceRulesTest, TheTreeFollowsTheRules) {
  ASSERT_TRUE(std::filesystem::is_directory(SourceRoot())) << SourceRoot();
  for (const RuleViolation& v : CheckSourceRules(SourceRoot())) {
    ADD_FAILURE() << "src/" << v.Describe();
  }
}

TEST(SourceRulesTest, AFallibleDeclarationWithoutNodiscardIsNamed) {
  const std::string header =
      "#pragma once\n"
      "[[nodiscard]] absl::Status Good(int x);\n"
      "absl::StatusOr<std::vector<int>> Bad(int x);\n"
      "class A {\n"
      " public:\n"
      "  [[nodiscard]] virtual absl::Status Fine() = 0;\n"
      "  static absl::Status AlsoBad();\n"
      "  absl::Status status() const;\n"
      "};\n";
  std::vector<RuleViolation> found = CheckNodiscard("a/b.h", header);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].Describe(),
            "a/b.h:3: Bad returns absl::StatusOr<std::vector<int>> but is not [[nodiscard]]");
  EXPECT_EQ(found[1].line, 7);
  EXPECT_EQ(found[2].line, 8);
  // In a .cc file an out-of-line member definition takes its header's attribute; a local
  // function does not have one.
  const std::string source =
      "absl::Status A::Fine() { return absl::OkStatus(); }\n"
      "namespace {\n"
      "absl::Status Local() { return absl::OkStatus(); }\n"
      "}\n";
  found = CheckNodiscard("a/b.cc", source);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].line, 3);
}

std::string Function(std::string_view head, int body_lines) {
  std::string text = std::string(head) + " {\n";
  for (int i = 0; i < body_lines; ++i) text += "  ++x;\n";
  return text + "}\n";
}

TEST(SourceRulesTest, ALongFunctionIsNamedUnlessACommentSaysWhy) {
  // 78 body lines: 80 with the head and the closing brace, the most allowed.
  std::string text = "namespace x {\n" + Function("int Fits(int x)", 78) + "\n" +
                     Function("absl::StatusOr<int> TooLong(\n    int x)", 78) + "\n" +
                     "// What it does.\n// One function: a dispatch on every opcode.\n" +
                     Function("int Explained(int x)", 200) + "}  // namespace x\n";
  std::vector<RuleViolation> found = CheckFunctionLength("p/f.cc", text, 80);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].line, 83);
  EXPECT_NE(found[0].what.find("function of 81 lines"), std::string::npos) << found[0].what;
  // Tables and types at column 0 are not functions, however long.
  std::string table = "const int kTable[] = {\n";
  for (int i = 0; i < 100; ++i) table += "    1,\n";
  table += "};\nstruct S {\n" + std::string(100, '\n') + "};\n";
  EXPECT_TRUE(CheckFunctionLength("p/t.cc", table, 80).empty());
}

}  // namespace
}  // namespace pillar::rules
