#include "common/module_loader.h"

#include <gtest/gtest.h>

namespace pillar {
namespace {

TEST(ModuleLoaderTest, AnUnboundSymbolIsDemangledAndItsLikelyCauseNamed) {
  const std::string explained = ExplainLoadError(
      "/opt/lib/libpillar_torch.so: undefined symbol: _ZN4absl12lts_202308025Mutex4LockEv");
  EXPECT_NE(explained.find("undefined symbol: _ZN4absl12lts_202308025Mutex4LockEv"),
            std::string::npos)
      << explained;
  EXPECT_NE(explained.find("(absl::lts_20230802::Mutex::Lock()): the module was built with "
                           "another build of pillar or of its libraries"),
            std::string::npos)
      << explained;
}

TEST(ModuleLoaderTest, OtherLoaderErrorsAreKeptAsTheyAre) {
  EXPECT_EQ(ExplainLoadError("x.so: cannot open shared object file: No such file or directory"),
            "x.so: cannot open shared object file: No such file or directory");
  // A C symbol stays as it is.
  EXPECT_NE(ExplainLoadError("m.so: undefined symbol: AbslInternalSleepFor")
                .find("(AbslInternalSleepFor)"),
            std::string::npos);
}

TEST(ModuleLoaderTest, AModuleThatDoesNotLoadIsRefusedWithTheLoadersReason) {
  ModuleSpec spec;
  spec.file_name = "libpillar_x.so";
  spec.entry_point = "pillar_x_v1";
  absl::StatusOr<void*> entry = LoadModuleEntryFrom("/nonexistent/libpillar_x.so", spec);
  ASSERT_FALSE(entry.ok());
  EXPECT_NE(entry.status().message().find("cannot load /nonexistent/libpillar_x.so"),
            std::string::npos)
      << entry.status();
}

}  // namespace
}  // namespace pillar
