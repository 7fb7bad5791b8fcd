#include "runtime/torch/torch_backend.h"

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

models::ModelConfig DemoConfig() {
  std::ifstream in(DemoVersion() / "model.toml");
  std::stringstream text;
  text << in.rdbuf();
  return *models::ModelConfig::Parse(text.str(), "model.toml");
}

TEST(TorchBackendTest, LoadsTheDemoModelAndRunsABatch) {
  if (!TorchAvailable()) GTEST_SKIP() << "built without LibTorch";
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      LoadTorchBackend(DemoVersion() / "model.pt", DemoConfig(), "cpu");
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
  if (!TorchAvailable()) GTEST_SKIP() << "built without LibTorch";
  testing::TempDir dir;
  std::ofstream(dir.path() / "model.pt") << "PK\x03\x04 definitely not a TorchScript zip";
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      LoadTorchBackend(dir.path() / "model.pt", DemoConfig(), "cpu");
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("cannot load TorchScript"), absl::string_view::npos);
  EXPECT_FALSE(LoadTorchBackend(dir.path() / "missing.pt", DemoConfig(), "cpu").ok());
}

TEST(TorchBackendTest, ModelThatDoesNotMatchItsConfigIsRefusedAtLoad) {
  if (!TorchAvailable()) GTEST_SKIP() << "built without LibTorch";
  models::ModelConfig wrong_input = DemoConfig();
  wrong_input.inputs[0].shape = {63};
  EXPECT_FALSE(LoadTorchBackend(DemoVersion() / "model.pt", wrong_input, "cpu").ok());
  models::ModelConfig wrong_output = DemoConfig();
  wrong_output.outputs[0].shape = {11};
  absl::StatusOr<std::unique_ptr<Backend>> b =
      LoadTorchBackend(DemoVersion() / "model.pt", wrong_output, "cpu");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not match model.toml"), absl::string_view::npos)
      << b.status();
  models::ModelConfig wrong_type = DemoConfig();
  wrong_type.outputs[0].datatype = protocol::DataType::kInt64;
  EXPECT_FALSE(LoadTorchBackend(DemoVersion() / "model.pt", wrong_type, "cpu").ok());
}

TEST(TorchBackendTest, CudaIsRefusedWhereAbsent) {
  if (CudaAvailable()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(ResolveDevice(models::DeviceKind::kCuda).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ResolveDevice(models::DeviceKind::kAuto), "cpu");
}

}  // namespace
}  // namespace pillar::runtime
