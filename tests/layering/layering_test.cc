// The layering of src/ holds: every #include between folders follows src/layering.txt, and the
// table itself has no cycle. The check is shown failing on planted trees and tables.
#include "layering/layering.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "testing/temp_dir.h"

namespace pillar::layering {
namespace {

namespace fs = std::filesystem;

fs::path SourceRoot() {
  const char* root = std::getenv("PILLAR_SOURCE_DIR");
  return fs::path(root == nullptr ? "." : root) / "src";
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(LayeringTest, EveryIncludeInTheTreeFollowsTheTable) {
  ASSERT_TRUE(fs::is_directory(SourceRoot())) << SourceRoot() << " (set PILLAR_SOURCE_DIR)";
  absl::StatusOr<LayerTable> table = ParseLayerTable(Slurp(SourceRoot() / "layering.txt"));
  ASSERT_TRUE(table.ok()) << "src/layering.txt: " << table.status();
  const std::vector<Violation> violations = CheckIncludes(SourceRoot(), *table);
  for (const Violation& v : violations) ADD_FAILURE() << "src/" << v.Describe();
  // The check saw the tree: the stages include the pipeline, and that is allowed.
  EXPECT_TRUE(table->at("stages").contains("pipeline"));
  EXPECT_FALSE(table->at("identity").contains("pipeline"));
}

TEST(LayeringTest, APlantedIncludeThatPointsUpIsNamedWithItsFileAndLine) {
  testing::TempDir dir;
  const fs::path src = dir.path() / "src";
  Write(src / "common" / "strings.h", "#pragma once\n");
  Write(src / "identity" / "principal.h", "#pragma once\n#include \"common/strings.h\"\n");
  Write(src / "pipeline" / "exchange.h", "#pragma once\n#include \"identity/principal.h\"\n");
  // The planted arrow: a domain part reaching up into the request path.
  Write(src / "identity" / "api_key.cc",
        "#include \"identity/principal.h\"\n\n#include <string>\n"
        "#include \"pipeline/exchange.h\"\n");
  absl::StatusOr<LayerTable> table =
      ParseLayerTable("pipeline: identity common\nidentity: common\ncommon:\n");
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Violation> violations = CheckIncludes(src, *table);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].file, "identity/api_key.cc");
  EXPECT_EQ(violations[0].line, 4);
  EXPECT_EQ(violations[0].from, "identity");
  EXPECT_EQ(violations[0].to, "pipeline");
  EXPECT_NE(violations[0].Describe().find("identity/api_key.cc:4:"), std::string::npos)
      << violations[0].Describe();
  // Spelled otherwise, still found; system headers and the file's own folder are not arrows.
  Write(src / "common" / "files.cc", "#  include   \"identity/principal.h\"\n#include <vector>\n");
  EXPECT_EQ(CheckIncludes(src, *table).size(), 2u);
}

TEST(LayeringTest, AFolderWithoutALineIsAViolation) {
  testing::TempDir dir;
  Write(dir.path() / "src" / "common" / "a.h", "#pragma once\n");
  Write(dir.path() / "src" / "gateway" / "b.h", "#include \"common/a.h\"\n");
  absl::StatusOr<LayerTable> table = ParseLayerTable("common:\n");
  ASSERT_TRUE(table.ok());
  const std::vector<Violation> violations = CheckIncludes(dir.path() / "src", *table);
  ASSERT_EQ(violations.size(), 2u);  // the folder itself, and its include of common/
  EXPECT_EQ(violations[0].line, 0);
  EXPECT_NE(violations[0].Describe().find("'gateway' has no line"), std::string::npos);
}

TEST(LayeringTest, ATableWhoseArrowsCloseACycleIsRefused) {
  absl::StatusOr<LayerTable> table = ParseLayerTable(
      "identity: pipeline common\npipeline: runtime common\n"
      "runtime: identity common\ncommon:\n");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("cycle"), std::string::npos) << table.status();
  EXPECT_NE(table.status().message().find("identity -> pipeline -> runtime -> identity"),
            std::string::npos)
      << table.status();
}

TEST(LayeringTest, MalformedTablesAreRefusedNamingTheLine) {
  EXPECT_NE(ParseLayerTable("common:\ncommon:\n").status().message().find("line 2"),
            std::string::npos);
  EXPECT_NE(ParseLayerTable("# x\nmodels common\n").status().message().find("line 2"),
            std::string::npos);
  EXPECT_NE(ParseLayerTable("models: nowhere\n").status().message().find("'nowhere' has no line"),
            std::string::npos);
  EXPECT_TRUE(ParseLayerTable("# only comments\n\n").ok());
}

}  // namespace
}  // namespace pillar::layering
