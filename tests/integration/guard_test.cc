// `pillar guard scan` as a user runs it: over a file, with and without a configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

class GuardCliTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_.path() / name).string();
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(GuardCliTest, ScanPrintsTypesAndOffsetsNeverTheValues) {
  const std::string text = "Seen zq.unique@example.org, CPF 123.456.789-09.\n";
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"guard", "scan", Write("t.txt", text)}, &out, &err), 1) << err;
  EXPECT_EQ(
      out,
      "{\"type\":\"EMAIL_ADDRESS\",\"start\":5,\"end\":26,\"score\":0.9,\"action\":\"redact\"}\n"
      "{\"type\":\"BR_CPF\",\"start\":32,\"end\":46,\"score\":1,\"action\":\"redact\"}\n");
  EXPECT_EQ(out.find("zq.unique"), std::string::npos);
  EXPECT_EQ(testing::RunPillar({"guard", "scan", "--redact", Write("t.txt", text)}, &out), 0);
  EXPECT_EQ(out, "Seen <EMAIL_ADDRESS>, CPF <BR_CPF>.\n");
  EXPECT_EQ(testing::RunPillar({"guard", "scan", Write("clean.txt", "nothing here 42\n")}, &out),
            0);
  EXPECT_EQ(out, "");
}

TEST_F(GuardCliTest, TheConfigurationDecidesAndABlockSaysWhereNotWhat) {
  const std::string config = Write("guard.toml",
                                   "[guard]\nredaction = \"mask\"\n"
                                   "[guard.entities.CREDIT_CARD]\naction = \"block\"\n");
  std::string out, err;
  EXPECT_EQ(testing::RunPillar(
                {"guard", "scan", "-c", config, "--redact", Write("t.txt", "call +1 415 555 2671")},
                &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "call +* *** *** ****");
  EXPECT_EQ(testing::RunPillar({"guard", "scan", "-c", config, "--redact",
                                Write("t.txt", "card 4111111111111111")},
                               &out, &err),
            1);
  EXPECT_EQ(out, "");
  EXPECT_NE(err.find("blocked: CREDIT_CARD at bytes 5-21"), std::string::npos) << err;
  EXPECT_EQ(err.find("4111"), std::string::npos);
}

TEST_F(GuardCliTest, RedactedTextIsPrintedWithoutItsDisplayControlsUnlessKept) {
  // Backspaces over a wide character: a terminal would show the key whole (review helper-72).
  const std::string text = "key AKIAIOSF\u4e2d\b\bODNN7EXAMPLE and zq.x@example.org\x1b[0m\n";
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"guard", "scan", "--redact", Write("t.txt", text)}, &out, &err), 0)
      << err;
  EXPECT_EQ(out, "key AKIAIOSF\u4e2dODNN7EXAMPLE and <EMAIL_ADDRESS>\n");
  const std::string keep = Write("keep.toml", "[guard]\nanswer_controls = \"keep\"\n");
  EXPECT_EQ(testing::RunPillar({"guard", "scan", "-c", keep, "--redact", Write("t.txt", text)},
                               &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "key AKIAIOSF\u4e2d\b\bODNN7EXAMPLE and <EMAIL_ADDRESS>\x1b[0m\n");
}

TEST_F(GuardCliTest, ABadConfigurationOrAMissingFileIsAnErrorNotAScan) {
  std::string out, err;
  const std::string bad = Write("bad.toml", "[guard]\naction = \"shred\"\n");
  EXPECT_EQ(testing::RunPillar({"guard", "scan", "-c", bad, Write("t.txt", "x")}, &out, &err), 2);
  EXPECT_NE(err.find("action"), std::string::npos) << err;
  EXPECT_EQ(testing::RunPillar({"guard", "scan", (dir_.path() / "missing").string()}, &out, &err),
            2);
}

}  // namespace
}  // namespace pillar
