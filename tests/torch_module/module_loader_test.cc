// The LibTorch module loader: a clear error naming the module and where it was looked for when
// there is none, refusals of files that are not pillar's module, and (in a build with LibTorch)
// the real module loading and answering through its interface.
#include "common/module_loader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "testing/temp_dir.h"
#include "torch_module/torch_module.h"

namespace pillar::torch_module {
namespace {

// Set by CTest in a build with LibTorch; read before any test changes it.
const std::string kBuiltModule = [] {
  const char* path = std::getenv("PILLAR_TORCH_MODULE");
  return std::string(path == nullptr ? "" : path);
}();

TEST(ModuleLoaderTest, AMissingModuleIsAnErrorNamingItAndWhereItWasLookedFor) {
  ::setenv("PILLAR_TORCH_MODULE", "/nonexistent/libpillar_torch.so", 1);
  absl::StatusOr<TorchModule*> module = LoadTorchModule();
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(module.status().message());
  EXPECT_NE(message.find("libpillar_torch.so"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libpillar_torch.so"), std::string::npos) << message;
  EXPECT_NE(message.find("PILLAR_WITH_TORCH"), std::string::npos) << message;
  // Cached: the process does not look again.
  EXPECT_EQ(LoadTorchModule().status(), module.status());
}

TEST(ModuleLoaderTest, FilesThatAreNotPillarsModuleAreRefused) {
  testing::TempDir dir;
  const std::string text = (dir.path() / "libpillar_torch.so").string();
  std::ofstream(text) << "not an ELF file";
  absl::StatusOr<TorchModule*> module = LoadTorchModuleFrom(text);
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.status().message().find("cannot load " + text), std::string::npos)
      << module.status();
  // A real shared object, but not pillar's.
  module = LoadTorchModuleFrom("libm.so.6");
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.status().message().find("is not pillar's libpillar_torch.so"), std::string::npos)
      << module.status();
}

// The types crossing the boundary are shared by layout: a module of another version or
// interface number is refused, naming both builds.
TEST(ModuleLoaderTest, AModuleOfAnotherBuildIsRefused) {
  const ModuleSpec spec{.file_name = "libpillar_x.so",
                        .env_var = "PILLAR_X_MODULE",
                        .entry_point = "pillar_x_module_v3",
                        .needed_for = "x",
                        .build_option = "-DPILLAR_WITH_X=ON",
                        .abi_version = 3,
                        .pillar_version = "1.2.0"};
  EXPECT_TRUE(CheckModuleBuild(spec, "/opt/x.so", 3, "1.2.0").ok());
  const absl::Status other_version = CheckModuleBuild(spec, "/opt/x.so", 3, "1.1.0");
  EXPECT_EQ(other_version.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other_version.message().find("/opt/x.so is a module of another pillar build (1.1.0"),
            std::string::npos)
      << other_version;
  EXPECT_FALSE(CheckModuleBuild(spec, "/opt/x.so", 2, "1.2.0").ok());
}

TEST(ModuleLoaderTest, TheBuiltModuleLoadsAndAnswersThroughItsInterface) {
  if (kBuiltModule.empty()) GTEST_SKIP() << "a build without LibTorch has no module";
  absl::StatusOr<TorchModule*> module = LoadTorchModuleFrom(kBuiltModule);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ((*module)->abi_version(), kModuleAbiVersion);
  EXPECT_EQ((*module)->pillar_version(), PILLAR_VERSION);
  absl::StatusOr<std::string> device = (*module)->ResolveDevice(models::DeviceKind::kCpu);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(*device, "cpu");
  // A second load of the same file is the same module.
  EXPECT_EQ(*LoadTorchModuleFrom(kBuiltModule), *module);
  // Bytes that are no TorchScript archive are refused with the module's own message.
  EXPECT_FALSE((*module)->LoadBackend("junk", "junk.pt", models::ModelConfig{}, "cpu").ok());
}

}  // namespace
}  // namespace pillar::torch_module
