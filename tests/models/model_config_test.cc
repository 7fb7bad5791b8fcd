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
  EXPECT_NE(ErrorFor("torchscript", "onnx")
                .find("platform must be \"torchscript\", \"remote\", \"simulated\" or \"openai\""),
            std::string::npos);
  EXPECT_NE(ErrorFor("platform = \"torchscript\"", "").find("model.platform is missing"),
            std::string::npos);
  EXPECT_NE(ErrorFor("max_batch_size = 8", "max_batch_size = -1").find("max_batch_size"),
            std::string::npos);
  EXPECT_NE(ErrorFor("\"FP32\"", "\"FP99\"").find("unknown datatype"), std::string::npos);
  // LibTorch has no tensors of strings: a TorchScript model that declares BYTES is refused at
  // load, not at its first request.
  EXPECT_NE(ErrorFor("\"INT64\"", "\"BYTES\"").find("'y' is BYTES: a TorchScript model"),
            std::string::npos);
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

constexpr const char* kSimulated = R"(
platform = "simulated"
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
[simulated]
latency = "lognormal"
latency_ms = 20
latency_sigma = 0.25
error_rate = 0.1
throttle_rate = 0.05
hang_rate = 0.01
retry_after_s = 3
hang_ms = 500
seed = 42
)";

TEST(ModelConfigTest, ParsesASimulatedModel) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(kSimulated, "m.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->platform, Platform::kSimulated);
  EXPECT_EQ(PlatformName(c->platform), "simulated");
  const SimulatedConfig& s = c->simulated;
  EXPECT_EQ(s.latency, LatencyDistribution::kLogNormal);
  EXPECT_EQ(s.latency_ms, 20);
  EXPECT_EQ(s.latency_sigma, 0.25);
  EXPECT_EQ(s.error_rate, 0.1);
  EXPECT_EQ(s.throttle_rate, 0.05);
  EXPECT_EQ(s.hang_rate, 0.01);
  EXPECT_EQ(s.retry_after_s, 3);
  EXPECT_EQ(s.hang_ms, 500);
  EXPECT_EQ(s.seed, 42u);
}

std::string SimulatedErrorFor(std::string_view from, std::string_view to) {
  std::string text = kSimulated;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(text, "m.toml");
  EXPECT_FALSE(c.ok()) << to;
  return std::string(c.status().message());
}

TEST(ModelConfigTest, ATensorNoRequestCouldCarryIsRefused) {
  EXPECT_NE(SimulatedErrorFor("shape = [2]", "shape = [1099511627776]")
                .find("'y' holds more than 67108864 elements in a full batch"),
            std::string::npos);
  // Small per row, too large for a full batch.
  EXPECT_NE(ErrorFor("[4, -1]", "[4096, 4096]")  // 16 M a row, 134 M in a batch of 8
                .find("'x' holds more than 67108864 elements in a full batch"),
            std::string::npos);
}

TEST(ModelConfigTest, ARemoteModelNamesItsUpstreamPlainly) {
  const std::string remote = R"(platform = "remote"
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
[remote]
endpoints = ["http://10.0.0.5:8000"]
model = "digits"
)";
  absl::StatusOr<ModelConfig> ok = ModelConfig::Parse(remote, "m.toml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->remote.model, "digits");
  for (const char* bad : {"a/b", "a b", "..", "x\\r\\nHost: y"}) {
    std::string text = remote;
    text.replace(text.find("\"digits\""), 8, std::string("\"") + bad + "\"");
    absl::StatusOr<ModelConfig> c = ModelConfig::Parse(text, "m.toml");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("m.toml:12: [remote] model must be up to 128 letters"),
              std::string::npos)
        << c.status();
  }
  std::string tables = remote;
  tables.replace(tables.find("endpoints = "), std::string::npos,
                 "endpoints = [\"http://a:1\", { url = \"http://b:2\", weight = 3, priority = 2, "
                 "zone = \"z\" }]\n");
  absl::StatusOr<ModelConfig> placed = ModelConfig::Parse(tables, "m.toml");
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->remote.endpoints.size(), 2u);
  EXPECT_EQ(placed->remote.endpoints[0].priority, 1);
  EXPECT_EQ(placed->remote.endpoints[1].url, "http://b:2");
  EXPECT_EQ(placed->remote.endpoints[1].weight, 3);
  EXPECT_EQ(placed->remote.endpoints[1].priority, 2);
  EXPECT_EQ(placed->remote.endpoints[1].zone, "z");
  tables.replace(tables.find("weight = 3"), 10, "weight = 0");
  EXPECT_NE(ModelConfig::Parse(tables, "m.toml").status().message().find("weight"),
            std::string::npos);
  std::string with_batching = remote + "[batching]\nmax_queue_size = 4\n";
  EXPECT_NE(ModelConfig::Parse(with_batching, "m.toml")
                .status()
                .message()
                .find("m.toml:13: [batching] does not apply to platform = \"remote\""),
            std::string::npos);
  // What only a language model's upstream takes, at its line.
  EXPECT_NE(ModelConfig::Parse(remote + "api_version = \"2024-06-01\"\n", "m.toml")
                .status()
                .message()
                .find("m.toml:13: [remote] api_key_header, api_version and an endpoint's model"),
            std::string::npos);
}

TEST(ModelConfigTest, BreakersAndHealthChecksAreReadStrictly) {
  const std::string remote = R"(platform = "remote"
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
[remote]
endpoints = ["http://10.0.0.5:8000"]
)";
  absl::StatusOr<ModelConfig> defaults = ModelConfig::Parse(remote, "m.toml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_FALSE(defaults->remote.breaker.enabled());
  EXPECT_TRUE(defaults->remote.backend_breaker.enabled());
  EXPECT_TRUE(defaults->remote.health_check.enabled);
  EXPECT_EQ(defaults->remote.health_check.interval_ms, 10'000);

  absl::StatusOr<ModelConfig> set = ModelConfig::Parse(remote + R"([remote.breaker]
failure_count = 3
interval_ms = 5000
status_codes = ["500-504", "429"]
error_reasons = ["timeout"]
trip_duration_ms = 7000
accept_retry_after = false
half_open_probes = 2
[remote.backend_breaker]
failure_percentage = 0
[remote.health_check]
path = "/health"
interval_ms = 500
unhealthy_threshold = 3
)",
                                                       "m.toml");
  ASSERT_TRUE(set.ok()) << set.status();
  const models::BreakerRule& rule = set->remote.breaker;
  EXPECT_EQ(rule.failure_count, 3);
  EXPECT_EQ(rule.interval_ms, 5000);
  ASSERT_EQ(rule.status_codes.size(), 2u);
  EXPECT_EQ(rule.status_codes[0], std::make_pair(500, 504));
  EXPECT_EQ(rule.status_codes[1], std::make_pair(429, 429));
  EXPECT_TRUE(rule.count_timeout);
  EXPECT_FALSE(rule.count_connect);
  EXPECT_FALSE(rule.count_bad_reply);
  EXPECT_EQ(rule.trip_duration_ms, 7000);
  EXPECT_FALSE(rule.accept_retry_after);
  EXPECT_EQ(rule.half_open_probes, 2);
  EXPECT_FALSE(set->remote.backend_breaker.enabled());
  EXPECT_EQ(set->remote.health_check.path, "/health");
  EXPECT_EQ(set->remote.health_check.unhealthy_threshold, 3);

  const std::pair<std::string, std::string> bad[] = {
      {"[remote.breaker]\nstatus_codes = [\"600\"]\n", "is not a status"},
      {"[remote.breaker]\nstatus_codes = [\"504-500\"]\n", "is not a status"},
      {"[remote.breaker]\nerror_reasons = [\"dns\"]\n", "is not one of"},
      {"[remote.breaker]\nfailure_percentage = 101\n", "failure_percentage"},
      {"[remote.breaker]\ntrip = 1\n", "trip"},
      {"[remote.health_check]\npath = \"/x y\"\n", "path must start with '/'"},
      {"[remote.health_check]\npath = \"health\"\n", "path must start with '/'"},
      {"[remote.health_check]\ninterval_ms = 0\n", "interval_ms"},
      {"idempotent = false\n[remote.hedge]\nenabled = true\n", "needs an idempotent model"},
      {"[remote.hedge]\nquantile = 1.5\n", "quantile"},
  };

  for (const auto& [text, error] : bad) {
    absl::StatusOr<ModelConfig> c = ModelConfig::Parse(remote + text, "m.toml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(error), std::string::npos) << c.status();
  }
}

TEST(ModelConfigTest, AFallbackChainIsAShortListOfModelNames) {
  const std::string model = R"(platform = "simulated"
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]
)";
  absl::StatusOr<ModelConfig> ok =
      ModelConfig::Parse("fallback = [\"digits-lite\", \"tiny\"]\n" + model, "m.toml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->fallback, (std::vector<std::string>{"digits-lite", "tiny"}));
  const std::pair<std::string, std::string> bad[] = {
      {"fallback = [\"../x\"]\n", "is not a model name"},
      {"fallback = [\"a\", \"a\"]\n", "names 'a' twice"},
      {"fallback = [\"a\", \"b\", \"c\", \"d\", \"e\"]\n", "at most 4 models"},
      {"fallback = \"a\"\n", "fallback"},
  };
  for (const auto& [line, error] : bad) {
    absl::StatusOr<ModelConfig> c = ModelConfig::Parse(line + model, "m.toml");
    ASSERT_FALSE(c.ok()) << line;
    EXPECT_NE(c.status().message().find(error), std::string::npos) << c.status();
  }
}

TEST(ModelConfigTest, ASimulatedModelIsReadAsStrictlyAsAnyOther) {
  EXPECT_NE(SimulatedErrorFor("\"lognormal\"", "\"pareto\"")
                .find("[simulated] latency must be \"fixed\", \"normal\", \"lognormal\" or "
                      "\"empirical\""),
            std::string::npos);
  EXPECT_NE(SimulatedErrorFor("seed = 42", "sead = 42").find("unknown key 'sead' in [simulated]"),
            std::string::npos);
  EXPECT_NE(SimulatedErrorFor("error_rate = 0.1", "error_rate = 1.5").find("error_rate"),
            std::string::npos);
  EXPECT_NE(SimulatedErrorFor("error_rate = 0.1", "error_rate = 0.95")
                .find("the rates of its faults add up to over 1"),
            std::string::npos);
  EXPECT_NE(SimulatedErrorFor("latency_ms = 20", "latency_ms = -1").find("latency_ms"),
            std::string::npos);
  EXPECT_NE(SimulatedErrorFor("retry_after_s = 3", "retry_after_s = 0").find("retry_after_s"),
            std::string::npos);
  // [generation] bounds a language model's calls; on a model of tensors it is a mistake.
  absl::StatusOr<ModelConfig> llm = ModelConfig::Parse(
      "platform = \"simulated\"\n[simulated]\napi = \"openai\"\n[generation]\nmax_tokens = 64\n"
      "max_n = 2\ndefault_max_tokens = 32\n",
      "m.toml");
  ASSERT_TRUE(llm.ok()) << llm.status();
  EXPECT_EQ(llm->generation.max_tokens, 64);
  EXPECT_EQ(llm->generation.max_n, 2);
  EXPECT_EQ(llm->generation.default_max_tokens, 32);
  EXPECT_FALSE(ModelConfig::Parse("platform = \"simulated\"\n[simulated]\napi = \"openai\"\n"
                                  "[generation]\nmax_tokens = 64\ndefault_max_tokens = 65\n",
                                  "m.toml")
                   .ok());
  EXPECT_NE(ErrorFor("kind = \"cpu\"", "kind = \"cpu\"\n[generation]\nmax_tokens = 5")
                .find("[generation] is only for a language model"),
            std::string::npos);
  // The simulation's table on a real model is a mistake, not something to ignore.
  EXPECT_NE(ErrorFor("kind = \"cpu\"", "kind = \"cpu\"\n[simulated]\nlatency_ms = 5")
                .find("[simulated] is only for platform = \"simulated\""),
            std::string::npos);
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
