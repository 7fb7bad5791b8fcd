// R-SEC-5, R-SEC-12, R-SEC-14 against the real binary: roles and attribute conditions decide
// every route, tenants cannot see each other's models through any route, invisible models
// answer exactly like missing ones, the policy reloads without a restart, and every
// authentication method (API key, JWT, client certificate) yields a principal the policy
// decides on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "app/routes.h"
#include "common/strings.h"
#include "testing/http_client.h"
#include "testing/jwt_signer.h"
#include "testing/server_process.h"
#include "testing/temp_dir.h"

namespace pillar {
namespace {

namespace fs = std::filesystem;
using testing::Bearer;
using testing::Fetch;
using testing::HttpReply;

constexpr const char* kPolicy = R"toml(version = 1

[[rule]]
name = "admins"
roles = ["admin"]
plane = "any"
actions = ["*"]
resources = ["*"]

[[rule]]
name = "users infer on their tenant's models they are cleared for"
roles = ["user"]
actions = ["infer", "read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant", "model.classification in principal.clearances"]

[[rule]]
name = "everyone with a role sees the server"
roles = ["user", "reader"]
actions = ["read_metadata"]
resources = ["server"]

[[rule]]
name = "readers read their tenant's metadata"
roles = ["reader"]
actions = ["read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]

[[rule]]
name = "monitors scrape metrics"
roles = ["monitor"]
plane = "admin"
actions = ["read_metrics"]
resources = ["metrics"]

[[rule]]
name = "listers may list"
roles = ["lister"]
plane = "admin"
actions = ["read_metadata"]
resources = ["models"]

[[rule]]
name = "listers see their tenant's models"
roles = ["lister"]
plane = "admin"
actions = ["read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]
)toml";

// A model store of three copies of the demo classifier with different owners.
void MakeStore(const fs::path& store) {
  const fs::path demo = testing::DemoStore() / "digits" / "1";
  struct Model {
    const char* name;
    const char* tenant;
    const char* classification;
  };
  for (Model m : {Model{"alpha", "a", "public"}, Model{"beta", "b", "public"},
                  Model{"gamma", "a", "secret"}}) {
    fs::path dir = store / m.name / "1";
    fs::create_directories(dir);
    fs::copy_file(demo / "model.pt", dir / "model.pt");
    std::ifstream in(demo / "model.toml");
    std::string toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    toml = toml.substr(0, toml.find("\n[access]"));
    std::ofstream(dir / "model.toml") << toml << "\n[access]\ntenant = \"" << m.tenant
                                      << "\"\nclassification = \"" << m.classification << "\"\n";
    // And a language model with the same owner, for the OpenAI-compatible routes.
    const fs::path chat = store / (std::string(m.name) + "-chat") / "1";
    fs::create_directories(chat);
    std::ofstream(chat / "model.toml")
        << "platform = \"simulated\"\n[access]\ntenant = \"" << m.tenant
        << "\"\nclassification = \"" << m.classification
        << "\"\n[simulated]\napi = \"openai\"\ntime_to_first_token_ms = 0\n";
  }
}

// The body of a call to `model`'s language model on an OpenAI-compatible route.
std::string OpenAiBody(const std::string& route, const std::string& model) {
  const std::string name = "\"model\":\"" + model + "-chat\"";
  if (route == "embeddings") return "{" + name + ",\"input\":\"hello\"}";
  if (route == "completions") return "{" + name + ",\"prompt\":\"hello\"}";
  return "{" + name + ",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
}

// One real held-out digit, the body every request here sends.
std::string InferBody() { return testing::InferBody({&testing::LoadHeldOut()[0]}); }

class AccessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess;
    MakeStore(server_->dir() / "store");
    server_->SetStore(server_->dir() / "store");
    policy_path_ = server_->dir() / "policy.toml";
    std::ofstream(policy_path_) << kPolicy;
    server_->AddConfig("[policy]\nfile = \"" + policy_path_.string() + "\"\nreload_ms = 50\n");
    auto key = [](const std::string& name, std::vector<std::string> options) {
      std::string k = server_->CreateKey(name, options);
      EXPECT_FALSE(k.empty()) << name;
      keys_[name] = k;
    };
    key("admin", {"--role", "admin"});
    key("user_a", {"--tenant", "a", "--role", "user", "--attr", "clearances=public"});
    key("user_a_secret", {"--tenant", "a", "--role", "user", "--attr", "clearances=public,secret"});
    key("reader_a", {"--tenant", "a", "--role", "reader"});
    key("user_b", {"--tenant", "b", "--role", "user", "--attr", "clearances=public"});
    key("monitor", {"--role", "monitor"});
    key("lister_a", {"--tenant", "a", "--role", "lister"});
    key("none", {"--tenant", "a"});
    ASSERT_TRUE(server_->Start()) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0);
    delete server_;
  }

  static HttpReply Call(const std::string& key, const http::Route& route, uint16_t port,
                        const std::string& model) {
    std::string path = route.pattern;
    for (auto [name, value] : {std::pair<std::string, std::string>{"{model}", model},
                               std::pair<std::string, std::string>{"{version}", "1"}}) {
      size_t at = path.find(name);
      if (at != std::string::npos) path.replace(at, name.size(), value);
    }
    std::string body;
    if (route.pattern.starts_with("/v1/")) {
      body = route.method == "POST" ? OpenAiBody(route.name, model) : "";
    } else if (route.method == "POST") {
      body = InferBody();
    }
    return Fetch(port, route.method, path, body, {Bearer(keys_[key])});
  }

  static testing::ServerProcess* server_;
  static fs::path policy_path_;
  static std::map<std::string, std::string> keys_;
};

testing::ServerProcess* AccessTest::server_ = nullptr;
fs::path AccessTest::policy_path_;
std::map<std::string, std::string> AccessTest::keys_;

TEST_F(AccessTest, EveryRouteAndRoleGetsExactlyWhatThePolicyGrants) {
  // Expected status per route and key, on model alpha (tenant a, public). A route missing here
  // fails the test: a new route must state who may call it.
  const std::map<std::string, std::map<std::string, int>> expected = {
      {"server_metadata",
       {{"admin", 200},
        {"user_a", 200},
        {"reader_a", 200},
        {"user_b", 200},
        {"monitor", 403},
        {"lister_a", 403},
        {"none", 403}}},
      {"model_metadata",
       {{"admin", 200},
        {"user_a", 200},
        {"reader_a", 200},
        {"user_b", 404},
        {"monitor", 404},
        {"lister_a", 404},
        {"none", 404}}},
      {"infer",
       {{"admin", 200},
        {"user_a", 200},
        {"reader_a", 403},
        {"user_b", 404},
        {"monitor", 404},
        {"lister_a", 404},
        {"none", 404}}},
      {"metrics",
       {{"admin", 200},
        {"user_a", 403},
        {"reader_a", 403},
        {"user_b", 403},
        {"monitor", 200},
        {"lister_a", 403},
        {"none", 403}}},
      // A job is its submitter's alone, whatever the policy: no job here is anyone's.
      {"job",
       {{"admin", 404},
        {"user_a", 404},
        {"reader_a", 404},
        {"user_b", 404},
        {"monitor", 404},
        {"lister_a", 404},
        {"none", 404}}},
      // Any principal the policy lets read the server may ask for the OpenAI-compatible model
      // list; what it lists is decided per model (OpenAiModelListShowsWhatThePrincipalMayCall).
      {"openai_models",
       {{"admin", 200},
        {"user_a", 200},
        {"reader_a", 200},
        {"user_b", 200},
        {"monitor", 403},
        {"lister_a", 403},
        {"none", 403}}},
      {"admin_models",
       {{"admin", 200},
        {"user_a", 403},
        {"reader_a", 403},
        {"user_b", 403},
        {"monitor", 403},
        {"lister_a", 200},
        {"none", 403}}},
  };
  auto family = [](const std::string& name) -> std::string {
    if (name == "model_version_metadata" || name == "model_ready" ||
        name == "model_version_ready") {
      return "model_metadata";
    }
    // A language model's calls are the infer action on the model the body names.
    if (name == "version_infer" || name == "chat_completions" || name == "completions" ||
        name == "embeddings") {
      return "infer";
    }
    if (name == "admin_backends") return "admin_models";  // the same action on "models"
    return name;
  };
  int checked = 0;
  const std::vector<std::pair<http::Router, uint16_t>> routers = {
      {app::DataRouter(), server_->data_port()}, {app::AdminRouter(), server_->admin_port()}};
  for (const auto& [router, port] : routers) {
    for (const http::Route& route : router.routes()) {
      if (route.anonymous) continue;
      auto it = expected.find(family(route.name));
      ASSERT_NE(it, expected.end()) << "no expectation for route " << route.name;
      for (const auto& [key, status] : it->second) {
        HttpReply r = Call(key, route, port, "alpha");
        EXPECT_EQ(r.status, status)
            << route.method << " " << route.pattern << " as " << key << ": " << r.body;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 60);
}

TEST_F(AccessTest, OpenAiModelListShowsWhatThePrincipalMayCall) {
  auto list = [](const std::string& key) {
    HttpReply r = Fetch(server_->data_port(), "GET", "/v1/models", "", {Bearer(keys_[key])});
    EXPECT_EQ(r.status, 200) << key << ": " << r.body;
    return r.body;
  };
  auto item = [](const char* id) {
    return StrCat("{\"id\":\"", id, "\",\"object\":\"model\",\"created\":0,",
                  "\"owned_by\":\"pillar\"}");
  };
  // Language models only: a model of tensors cannot be called on the /v1 routes.
  EXPECT_EQ(list("admin"), StrCat("{\"object\":\"list\",\"data\":[", item("alpha-chat"), ",",
                                  item("beta-chat"), ",", item("gamma-chat"), "]}"));
  EXPECT_EQ(list("user_a"), StrCat("{\"object\":\"list\",\"data\":[", item("alpha-chat"), "]}"));
  EXPECT_EQ(list("user_a_secret"), StrCat("{\"object\":\"list\",\"data\":[", item("alpha-chat"),
                                          ",", item("gamma-chat"), "]}"));
  EXPECT_EQ(list("user_b"), StrCat("{\"object\":\"list\",\"data\":[", item("beta-chat"), "]}"));
  // A reader may read metadata but call nothing: nothing is listed.
  EXPECT_EQ(list("reader_a"), "{\"object\":\"list\",\"data\":[]}");
  // Refusals on the /v1 routes are in OpenAI's error shape, as its clients expect.
  HttpReply denied =
      Fetch(server_->data_port(), "GET", "/v1/models", "", {Bearer(keys_["monitor"])});
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.body.find("\"type\":\"permission_error\""), std::string::npos) << denied.body;
  HttpReply anonymous = Fetch(server_->data_port(), "GET", "/v1/models", "", {});
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(anonymous.body.rfind("{\"error\":{\"message\":", 0), 0u) << anonymous.body;
  EXPECT_NE(anonymous.body.find("\"code\":\"invalid_api_key\""), std::string::npos)
      << anonymous.body;
}

TEST_F(AccessTest, ATenantCannotReachAnotherTenantsModelThroughAnyRoute) {
  const http::Router data = app::DataRouter();
  for (const http::Route& route : data.routes()) {
    if (route.anonymous || route.pattern.find("{model}") == std::string::npos) continue;
    HttpReply hidden = Call("user_b", route, server_->data_port(), "alpha");
    HttpReply missing = Call("user_b", route, server_->data_port(), "no-such-model");
    EXPECT_EQ(hidden.status, 404) << route.pattern;
    // Byte for byte the answer for a model that does not exist, but for the name.
    std::string expected_body = missing.body;
    expected_body.replace(expected_body.find("no-such-model"), 13, "alpha");
    EXPECT_EQ(hidden.body, expected_body) << route.pattern;
    // And the owner gets through on the same route.
    EXPECT_EQ(Call("user_a", route, server_->data_port(), "alpha").status, 200) << route.pattern;
  }
  // Listing: a tenant's lister sees its own models and nothing of the other tenant's.
  HttpReply list =
      Fetch(server_->admin_port(), "GET", "/admin/v1/models", "", {Bearer(keys_["lister_a"])});
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_NE(list.body.find("\"alpha\""), std::string::npos);
  EXPECT_NE(list.body.find("\"gamma\""), std::string::npos);
  EXPECT_EQ(list.body.find("beta"), std::string::npos) << list.body;
  // Clearance: same tenant, but "secret" needs the clearance.
  HttpReply secret = Fetch(server_->data_port(), "POST", "/v2/models/gamma/infer", InferBody(),
                           {Bearer(keys_["user_a"])});
  EXPECT_EQ(secret.status, 404);
  HttpReply cleared = Fetch(server_->data_port(), "POST", "/v2/models/gamma/infer", InferBody(),
                            {Bearer(keys_["user_a_secret"])});
  EXPECT_EQ(cleared.status, 200) << cleared.body;
}

TEST_F(AccessTest, ADenialNamesTheRequestAndTheLogNamesTheRule) {
  HttpReply r = Fetch(server_->data_port(), "POST", "/v2/models/alpha/infer", InferBody(),
                      {Bearer(keys_["reader_a"])});
  ASSERT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("may not infer on model:alpha/1"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("policy.toml"), std::string::npos);  // the policy stays private
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    std::ifstream log(server_->dir() / "access.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    logged = text.find("no rule grants infer on model:alpha/1") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(logged);
}

TEST_F(AccessTest, PolicyReloadsWithoutRestartAndABadPolicyKeepsTheOldOne) {
  const std::string metrics_before =
      Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(keys_["monitor"])}).body;
  ASSERT_FALSE(metrics_before.empty());
  // Broken: refused, the running policy stays.
  std::ofstream(policy_path_) << "version = 1\n[[rule]]\nname = \"x\"\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Fetch(server_->admin_port(), "GET", "/metrics", "", {Bearer(keys_["monitor"])}).status,
            200);
  EXPECT_NE(server_->Log().find("policy reload refused"), std::string::npos);
  // A new policy that also lets monitors see the server metadata.
  std::ofstream(policy_path_) << kPolicy << R"(
[[rule]]
name = "monitors see the server"
roles = ["monitor"]
actions = ["read_metadata"]
resources = ["server"]
)";
  int status = 0;
  for (int i = 0; i < 200 && status != 200; ++i) {
    status = Fetch(server_->data_port(), "GET", "/v2", "", {Bearer(keys_["monitor"])}).status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  std::ofstream(policy_path_) << kPolicy;  // back, for the other tests
  for (int i = 0; i < 200 && status == 200; ++i) {
    status = Fetch(server_->data_port(), "GET", "/v2", "", {Bearer(keys_["monitor"])}).status;
    if (status == 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 403);
}

TEST_F(AccessTest, PolicyCheckExplainsADecision) {
  std::string out;
  EXPECT_EQ(testing::RunPillar(
                {"policy",          "check",    "--policy",        policy_path_.string(),
                 "--principal",     "key:x",    "--tenant",        "a",
                 "--role",          "user",     "--attr",          "clearances=public",
                 "--action",        "infer",    "--resource",      "model:gamma/1",
                 "--resource-attr", "tenant=a", "--resource-attr", "classification=secret"},
                &out),
            1);
  EXPECT_NE(out.find("denied: rule 'users infer on their tenant's models they are cleared for'"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("`model.classification in principal.clearances` does not hold"),
            std::string::npos);
  out.clear();
  EXPECT_EQ(testing::RunPillar({"policy", "check", "--policy", policy_path_.string(), "--principal",
                                "key:y", "--role", "admin", "--plane", "admin", "--action",
                                "manage_keys", "--resource", "keys"},
                               &out),
            0);
  EXPECT_NE(out.find("allowed by rule 'admins'"), std::string::npos) << out;
  std::string err;
  const fs::path bad = server_->dir() / "bad-policy.toml";
  std::ofstream(bad) << "version = 1\n\n[[rule]]\nname = \"r\"\nroles = [\"u\"]\nactions = "
                        "[\"fly\"]\nresources = [\"*\"]\n";
  EXPECT_EQ(testing::RunPillar({"policy", "validate", "--policy", bad.string()}, &out, &err), 2);
  EXPECT_NE(err.find("bad-policy.toml:6: rule 'r': unknown action 'fly'"), std::string::npos)
      << err;
}

TEST_F(AccessTest, PolicyCheckSaysAnAliasWasTakenLiterally) {
  // The server decides a request for model:gamma/prod on the version prod names; the check has
  // no store to resolve it and says so rather than let a denial stand unexplained.
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"policy", "check", "--policy", policy_path_.string(), "--role",
                                "user", "--tenant", "a", "--action", "infer", "--resource",
                                "model:gamma/prod", "--resource-attr", "tenant=a"},
                               &out, &err),
            1);
  EXPECT_NE(err.find("'prod' was taken literally; a request naming an alias is decided on the "
                     "version the alias names"),
            std::string::npos)
      << err;
  err.clear();
  EXPECT_EQ(testing::RunPillar({"policy", "check", "--policy", policy_path_.string(), "--role",
                                "user", "--tenant", "a", "--action", "infer", "--resource",
                                "model:gamma/1", "--resource-attr", "tenant=a"},
                               &out, &err),
            1);
  EXPECT_EQ(err.find("taken literally"), std::string::npos) << err;
}

TEST(PolicyValidateTest, WarnsAboutDenyRulesAMissingAttributeEscapesAndStillSucceeds) {
  testing::TempDir dir;
  const fs::path path = dir.path() / "policy.toml";
  std::ofstream(path) << "version = 1\n\n[[rule]]\nname = \"no finance\"\neffect = \"deny\"\n"
                         "roles = [\"user\"]\nactions = [\"infer\"]\nresources = [\"model:*\"]\n"
                         "when = [\"principal.department != 'finance'\"]\n";
  std::string out, err;
  EXPECT_EQ(testing::RunPillar({"policy", "validate", "--policy", path.string()}, &out, &err), 0);
  EXPECT_NE(out.find("1 rules, 0 limits: valid (1 warning)"), std::string::npos) << out;
  EXPECT_NE(err.find("policy.toml:3: warning: deny rule 'no finance' does not deny a request "
                     "without principal.department"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("not denied by this rule"), std::string::npos) << err;
}

}  // namespace
}  // namespace pillar
