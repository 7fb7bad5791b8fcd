#include "models/model_config.h"

#include <gtest/gtest.h>

namespace pillar::models {
namespace {

constexpr const char* kGood = R"(
platform = "torchscript"
max_batch_size = 8
[[input]]
name = "x"
datatype = "FP32"
shape = [4, -1]
[[output]]
name = "y"
datatype = "INT64"
shape = [1]
[batching]
max_queue_delay_us = 100
max_queue_size = 16
[instance]
count = 3
kind = "cpu"
)";

TEST(ModelConfigTest, ParsesEveryField) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(kGood, "m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_batch_size, 8);
  EXPECT_EQ(c->inputs[0].shape, (std::vector<int64_t>{4, -1}));
  EXPECT_EQ(c->outputs[0].datatype, protocol::DataType::kInt64);
  EXPECT_EQ(c->batching.max_queue_delay_us, 100);
  EXPECT_EQ(c->batching.max_queue_size, 16);
  EXPECT_EQ(c->instance.count, 3);
  EXPECT_EQ(c->instance.kind, DeviceKind::kCpu);
}

std::string ErrorFor(std::string_view from, std::string_view to) {
  std::string text = kGood;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(text, "m.toml");
  EXPECT_FALSE(c.ok()) << to;
  return std::string(c.status().message());
}

TEST(ModelConfigTest, RejectsWhatCannotBeServed) {
  EXPECT_NE(ErrorFor("torchscript", "onnx").find("platform 'onnx' is not supported"),
            std::string::npos);
  EXPECT_NE(ErrorFor("max_batch_size = 8", "max_batch_size = -1").find("max_batch_size"),
            std::string::npos);
  EXPECT_NE(ErrorFor("\"FP32\"", "\"FP99\"").find("unknown datatype"), std::string::npos);
  EXPECT_NE(ErrorFor("[4, -1]", "[0]").find("positive integers or -1"), std::string::npos);
  EXPECT_NE(ErrorFor("name = \"y\"", "name = \"\"").find("has no name"), std::string::npos);
  EXPECT_NE(
      ErrorFor("count = 3", "count = 0").find("[instance] count must be an integer in [1, 64]"),
      std::string::npos);
  EXPECT_NE(ErrorFor("kind = \"cpu\"", "kind = \"tpu\"").find("instance.kind 'tpu'"),
            std::string::npos);
  EXPECT_NE(ErrorFor("max_queue_size = 16", "max_queue_size = 0").find("max_queue_size"),
            std::string::npos);
  EXPECT_NE(ErrorFor("kind = \"cpu\"",
                     "kind = \"cpu\"\n[[input]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]")
                .find("input 'x' is declared twice"),
            std::string::npos);
}

TEST(ModelConfigTest, MistypedOrMisspelledKeysAreErrorsNotDefaults) {
  EXPECT_NE(ErrorFor("max_batch_size = 8", "max_batch_size = \"8\"")
                .find("max_batch_size must be an integer"),
            std::string::npos);
  EXPECT_NE(ErrorFor("max_batch_size = 8", "max_batch_szie = 8")
                .find("unknown key 'max_batch_szie' in [model]"),
            std::string::npos);
  EXPECT_NE(ErrorFor("max_queue_size = 16", "max_queue_sise = 16")
                .find("unknown key 'max_queue_sise' in [batching]"),
            std::string::npos);
  EXPECT_NE(ErrorFor("count = 3", "count = 3.0").find("count must be an integer"),
            std::string::npos);
  EXPECT_NE(ErrorFor("[4, -1]", "[4.0, -1]").find("positive integers or -1"), std::string::npos);
  EXPECT_NE(ErrorFor("datatype = \"INT64\"", "datatype = \"INT64\"\ndtype = 1")
                .find("unknown key 'dtype' in [output]"),
            std::string::npos);
  EXPECT_NE(ErrorFor("[batching]", "batching = 3\n[batchin]").find("unknown key"),
            std::string::npos);
}

TEST(ModelConfigTest, SyntaxErrorsNameTheFileAndLine) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse("platform = \n", "store/m/1/model.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("store/m/1/model.toml:1"), absl::string_view::npos)
      << c.status();
}

TEST(ModelConfigTest, MissingSectionsAreErrors) {
  EXPECT_FALSE(ModelConfig::Parse("platform = \"torchscript\"\n", "m").ok());
}

}  // namespace
}  // namespace pillar::models

namespace pillar::models {
namespace {

TEST(ModelConfigTest, AccessAttributesAreStringsOrListsAndNameAndVersionAreReserved) {
  const std::string base =
      "platform = \"torchscript\"\n[[input]]\nname = \"x\"\ndatatype = \"FP32\"\nshape = [1]\n"
      "[[output]]\nname = \"y\"\ndatatype = \"FP32\"\nshape = [1]\n";
  auto config = ModelConfig::Parse(
      base + "[access]\ntenant = \"acme\"\nregions = [\"eu\", \"us\"]\n", "m.toml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->access.at("tenant"), std::vector<std::string>{"acme"});
  EXPECT_EQ(config->access.at("regions"), (std::vector<std::string>{"eu", "us"}));
  EXPECT_TRUE(ModelConfig::Parse(base, "m.toml")->access.empty());
  auto error = [&](const std::string& access) {
    auto c = ModelConfig::Parse(base + access, "m.toml");
    EXPECT_FALSE(c.ok()) << access;
    return std::string(c.status().message());
  };
  EXPECT_EQ(error("[access]\nname = \"other\"\n"),
            "m.toml: access.name is reserved (the server sets it)");
  EXPECT_EQ(error("[access]\ntenant = 3\n"),
            "m.toml: access.tenant must be a non-empty string or a non-empty array of them");
  EXPECT_EQ(error("[access]\ntenant = []\n"),
            "m.toml: access.tenant must be a non-empty string or a non-empty array of them");
  auto top = ModelConfig::Parse("access = \"acme\"\n" + base, "m.toml");
  EXPECT_EQ(top.status().message(), "m.toml: 'access' must be a table");
}

}  // namespace
}  // namespace pillar::models
