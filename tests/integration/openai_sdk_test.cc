// A real client: the official OpenAI SDK (npm package `openai`, run with Node) drives a pillar
// gateway exactly as a user's code would (tests/sdk/openai_sdk_check.mjs): chat completions
// plain and streamed, embeddings, the model list, and the errors its classes map from 401,
// 403, 404, 429 and a blocked prompt. The package is a test-only dependency, installed here
// from tests/sdk/package-lock.json with npm ci into the build tree.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "testing/server_process.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;

// Runs `command` with a shell; its exit code, and what it printed (stderr too) in `out`.
int Shell(const std::string& command, std::string* out) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out->append(buffer, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

constexpr char kPolicy[] = R"toml(version = 1
[[rule]]
name = "admins"
roles = ["admin"]
plane = "any"
actions = ["*"]
resources = ["*"]
[[rule]]
name = "users see the server"
roles = ["user"]
actions = ["read_metadata"]
resources = ["server"]
[[rule]]
name = "users use their tenant's models"
roles = ["user"]
actions = ["infer", "read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]
[[rule]]
name = "readers see their tenant's models"
roles = ["reader"]
actions = ["read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]
[[limit]]
name = "one-call"
per = "key"
tenants = ["demo"]
rate = 0.001
burst = 1
)toml";

TEST(OpenAiSdkTest, TheOfficialClientSeesWhatItExpects) {
  std::string out;
  if (Shell("node --version", &out) != 0) GTEST_SKIP() << "no Node.js here: " << out;
  // The package, once per build tree.
  const fs::path sdk = fs::current_path() / "openai-sdk";
  if (!fs::exists(sdk / "node_modules" / "openai" / "package.json")) {
    fs::create_directories(sdk);
    for (const char* file : {"package.json", "package-lock.json"}) {
      fs::copy_file(testing::SourceDir() / "tests/sdk" / file, sdk / file,
                    fs::copy_options::overwrite_existing);
    }
    out.clear();
    ASSERT_EQ(Shell("cd " + sdk.string() + " && npm ci --no-audit --no-fund", &out), 0)
        << "npm could not install the test-only openai package: " << out;
  }
  fs::copy_file(testing::SourceDir() / "tests/sdk/openai_sdk_check.mjs",
                sdk / "openai_sdk_check.mjs", fs::copy_options::overwrite_existing);

  testing::ServerProcess gateway;
  const fs::path store = gateway.dir() / "store";
  fs::create_directories(store / "assistant" / "1");
  std::ofstream(store / "assistant" / "1" / "model.toml")
      << "platform = \"simulated\"\n[access]\ntenant = \"demo\"\n[simulated]\napi = \"openai\"\n"
         "time_to_first_token_ms = 2\ntokens_per_second = 1000\ncompletion_tokens = 6\n";
  gateway.SetStore(store);
  std::ofstream(gateway.dir() / "policy.toml") << kPolicy;
  gateway.AddConfig("[policy]\nfile = \"" + (gateway.dir() / "policy.toml").string() +
                    "\"\n[guard]\n");
  const std::string key = gateway.CreateKey("sdk");
  const std::string reader = gateway.CreateKey("reader", {"--role", "reader", "--tenant", "demo"});
  const std::string limited = gateway.CreateKey("limited", {"--role", "user", "--tenant", "demo"});
  ASSERT_TRUE(gateway.Start()) << gateway.Log();

  out.clear();
  const int rc = Shell("cd " + sdk.string() + " && PILLAR_URL=http://127.0.0.1:" +
                           std::to_string(gateway.data_port()) + "/v1 PILLAR_KEY=" + key +
                           " PILLAR_READER_KEY=" + reader + " PILLAR_LIMITED_KEY=" + limited +
                           " node openai_sdk_check.mjs",
                       &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("ok 429 says when to come back"), std::string::npos) << out;
  EXPECT_EQ(gateway.Stop(), 0) << gateway.Log();
}

}  // namespace
}  // namespace pillar
