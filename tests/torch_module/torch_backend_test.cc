#include "torch_module/torch_backend.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
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

// Held-out digits (models/demo/heldout.csv: label, then 64 pixels) as one batch.
protocol::Tensor HeldOutDigits(int rows) {
  const char* src = std::getenv("PILLAR_SOURCE_DIR");
  std::ifstream in(std::filesystem::path(src ? src : ".") / "models/demo/heldout.csv");
  std::string line;
  std::getline(in, line);  // the header
  std::vector<float> pixels;
  for (int r = 0; r < rows && std::getline(in, line); ++r) {
    std::stringstream fields(line);
    std::string field;
    std::getline(fields, field, ',');  // the label
    while (std::getline(fields, field, ',')) pixels.push_back(std::stof(field));
  }
  protocol::Tensor t{"pixels", protocol::DataType::kFp32, {rows, 64}, std::string()};
  t.data.assign(reinterpret_cast<const char*>(pixels.data()), pixels.size() * 4);
  return t;
}

std::vector<float> Floats(const protocol::Tensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

// [instance] optimize (the default) freezes the module and optimizes it for inference when that
// computes the same outputs faster: on real digits it answers what the module as saved does,
// within float rounding, and says on stderr what it decided.
TEST(TorchBackendTest, TheOptimizedModuleAnswersWhatTheSavedOneDoes) {
  models::ModelConfig saved_config = DemoConfig();
  saved_config.instance.optimize = false;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Backend>> saved =
      LoadFile(DemoVersion() / "model.pt", saved_config);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // nothing tried, nothing said
  ASSERT_TRUE(saved.ok()) << saved.status();
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Backend>> optimized =
      LoadFile(DemoVersion() / "model.pt", DemoConfig());
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(optimized.ok()) << optimized.status();
  EXPECT_TRUE(said.find("model.pt: optimized for inference") != std::string::npos ||
              said.find("model.pt: served as saved: optimized, its probes took") !=
                  std::string::npos)
      << said;
  for (int rows : {1, 7, 64}) {
    std::vector<protocol::Tensor> a = {HeldOutDigits(rows)}, b = a;
    absl::StatusOr<std::vector<protocol::Tensor>> want = (*saved)->Execute(a);
    absl::StatusOr<std::vector<protocol::Tensor>> got = (*optimized)->Execute(b);
    ASSERT_TRUE(want.ok() && got.ok());
    const std::vector<float> w = Floats((*want)[0]), g = Floats((*got)[0]);
    ASSERT_EQ(w.size(), size_t(rows) * 10);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::fabs(w[i]));
  }
}

// A module whose optimized form answers otherwise than the saved one (here: both draw random
// numbers) is served as saved, and says why.
TEST(TorchBackendTest, AModuleWhoseOptimizedFormDiffersIsServedAsSaved) {
  torch::jit::Module module("Noise");
  module.define(R"(
def forward(self, pixels):
    return torch.rand(pixels.size(0), 10)
)");
  std::ostringstream bytes;
  module.save(bytes);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      LoadTorchBackend(bytes.str(), "noise.pt", DemoConfig(), "cpu");
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_NE(said.find("noise.pt: served as saved: optimized, its output 'probabilities' differs "
                      "beyond rounding on a probe of one row"),
            std::string::npos)
      << said;
  std::vector<protocol::Tensor> in = {HeldOutDigits(2)};
  EXPECT_TRUE((*backend)->Execute(in).ok());
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
