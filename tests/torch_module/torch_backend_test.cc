#include "torch_module/torch_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "testing/temp_dir.h"

namespace pillar::runtime {
namespace {

std::filesystem::path DemoVersion() {
  const char* src = std::getenv("PILLAR_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / "models/demo/store/digits/1";
}

std::string ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

absl::StatusOr<std::unique_ptr<Backend>> LoadFile(const std::filesystem::path& path,
                                                  const models::ModelConfig& config) {
  return LoadTorchBackend(ReadBytes(path), path.string(), config, "cpu");
}

models::ModelConfig DemoConfig() {
  std::ifstream in(DemoVersion() / "model.toml");
  std::stringstream text;
  text << in.rdbuf();
  return *models::ModelConfig::Parse(text.str(), "model.toml");
}

TEST(TorchBackendTest, LoadsTheDemoModelAndRunsABatch) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      LoadFile(DemoVersion() / "model.pt", DemoConfig());
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<protocol::Tensor> inputs = {
      {"pixels", protocol::DataType::kFp32, {3, 64}, std::string(3 * 64 * 4, '\0')}};
  absl::StatusOr<std::vector<protocol::Tensor>> out = (*backend)->Execute(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{3, 10}));
  std::vector<float> p(30);
  std::memcpy(p.data(), (*out)[0].data.data(), 120);
  float sum = 0;
  for (int i = 0; i < 10; ++i) sum += p[size_t(i)];
  EXPECT_NEAR(sum, 1.0f, 1e-5);  // softmax rows
}

TEST(TorchBackendTest, GarbageFileIsALoadErrorNotACrash) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "model.pt") << "PK\x03\x04 definitely not a TorchScript zip";
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      LoadFile(dir.path() / "model.pt", DemoConfig());
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("cannot load TorchScript"), absl::string_view::npos);
  EXPECT_FALSE(LoadTorchBackend("", "empty.pt", DemoConfig(), "cpu").ok());
  // Every prefix of a real archive is refused cleanly: the in-memory stream reports its end.
  const std::string real = ReadBytes(DemoVersion() / "model.pt");
  for (size_t cut : {size_t(1), size_t(22), real.size() / 2, real.size() - 1}) {
    EXPECT_FALSE(
        LoadTorchBackend(std::string_view(real).substr(0, cut), "cut.pt", DemoConfig(), "cpu").ok())
        << cut;
  }
}

TEST(TorchBackendTest, ModelThatDoesNotMatchItsConfigIsRefusedAtLoad) {
  models::ModelConfig wrong_input = DemoConfig();
  wrong_input.inputs[0].shape = {63};
  EXPECT_FALSE(LoadFile(DemoVersion() / "model.pt", wrong_input).ok());
  models::ModelConfig wrong_output = DemoConfig();
  wrong_output.outputs[0].shape = {11};
  absl::StatusOr<std::unique_ptr<Backend>> b = LoadFile(DemoVersion() / "model.pt", wrong_output);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not match model.toml"), absl::string_view::npos)
      << b.status();
  models::ModelConfig wrong_type = DemoConfig();
  wrong_type.outputs[0].datatype = protocol::DataType::kInt64;
  EXPECT_FALSE(LoadFile(DemoVersion() / "model.pt", wrong_type).ok());
}

TEST(TorchBackendTest, CudaIsRefusedWhereAbsent) {
  if (CudaAvailable()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(ResolveDevice(models::DeviceKind::kCuda).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ResolveDevice(models::DeviceKind::kAuto), "cpu");
}

}  // namespace
}  // namespace pillar::runtime
