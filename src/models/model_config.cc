#include "models/model_config.h"

#include <algorithm>
#include <set>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "protocol/tensor.h"

namespace pillar::models {
namespace {

constexpr int64_t kMaxBatchSize = 1 << 16;
constexpr int kMaxInstances = 64;
// What the request decoder accepts in one tensor (protocol::DecodeLimits): a declared shape whose
// batch of rows holds more could never be sent or answered, and a simulated model would try to
// allocate it.
constexpr int64_t kMaxTensorElements = 64 * 1024 * 1024;

[[nodiscard]] absl::Status Error(std::string_view source, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(source, ": ", what));
}

[[nodiscard]] absl::StatusOr<std::vector<TensorSpec>> ParseTensors(const toml::table& root,
                                                                   std::string_view key,
                                                                   std::string_view source) {
  std::vector<TensorSpec> specs;
  const toml::node* node = root.get(key);
  if (node == nullptr) return Error(source, StrCat("no [[", key, "]] tables"));
  const toml::array* array = node->as_array();
  if (array == nullptr || array->empty()) {
    return Error(source, StrCat("'", key, "' must be a non-empty array of tables"));
  }
  std::set<std::string> names;
  for (const toml::node& entry : *array) {
    const toml::table* table = entry.as_table();
    if (table == nullptr) return Error(source, StrCat("each '", key, "' must be a table"));
    TensorSpec spec;
    TomlSection fields(table, std::string(key), source);
    std::string name, type;
    PILLAR_RETURN_IF_ERROR(fields.ReadString("name", name));
    PILLAR_RETURN_IF_ERROR(fields.ReadString("datatype", type));
    fields.Allow("shape");
    PILLAR_RETURN_IF_ERROR(fields.CheckNoUnknownKeys());
    if (name.empty()) return Error(source, StrCat("an ", key, " has no name"));
    spec.name = name;
    if (!names.insert(spec.name).second) {
      return Error(source, StrCat(key, " '", spec.name, "' is declared twice"));
    }
    if (type.empty()) return Error(source, StrCat(key, " '", spec.name, "' has no datatype"));
    absl::StatusOr<protocol::DataType> parsed = protocol::ParseDataType(type);
    if (!parsed.ok())
      return Error(source, StrCat(key, " '", spec.name, "': ", parsed.status().message()));
    spec.datatype = *parsed;
    const toml::array* shape = (*table)["shape"].as_array();
    if (shape == nullptr) return Error(source, StrCat(key, " '", spec.name, "' has no shape"));
    for (const toml::node& dim : *shape) {
      std::optional<int64_t> d =
          dim.is_integer() ? std::optional<int64_t>(dim.as_integer()->get()) : std::nullopt;
      if (!d || *d < -1 || *d == 0) {
        return Error(source, StrCat(key, " '", spec.name,
                                    "': shape dimensions are positive integers or -1"));
      }
      spec.shape.push_back(*d);
    }
    if (spec.shape.size() > 16)
      return Error(source, StrCat(key, " '", spec.name, "' has too many dimensions"));
    specs.push_back(std::move(spec));
  }
  return specs;
}

[[nodiscard]] absl::Status ParseAccess(const toml::table& root, std::string_view source,
                                       Attributes& out) {
  const toml::node* node = root.get("access");
  if (node == nullptr) return absl::OkStatus();
  const toml::table* table = node->as_table();
  if (table == nullptr) return Error(source, "'access' must be a table");
  for (const auto& [key, value] : *table) {
    std::string name(key.str());
    if (name == "name" || name == "version") {
      return Error(source, StrCat("access.", name, " is reserved (the server sets it)"));
    }
    std::vector<std::string> values;
    auto take = [&](const toml::node& n) {
      if (!n.is_string() || n.as_string()->get().empty()) return false;
      values.push_back(n.as_string()->get());
      return true;
    };
    bool ok = true;
    if (const toml::array* array = value.as_array()) {
      ok = !array->empty();
      for (const toml::node& n : *array) ok = ok && take(n);
    } else {
      ok = take(value);
    }
    if (!ok) {
      return Error(source, StrCat("access.", name,
                                  " must be a non-empty string or a non-empty array of them"));
    }
    out[name] = std::move(values);
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status CheckTensorSizes(const ModelConfig& config, std::string_view source) {
  for (const std::vector<TensorSpec>* specs : {&config.inputs, &config.outputs}) {
    for (const TensorSpec& spec : *specs) {
      if (spec.datatype == protocol::DataType::kBytes &&
          config.platform == Platform::kTorchScript) {
        return Error(source, StrCat("'", spec.name,
                                    "' is BYTES: a TorchScript model has no tensors of strings "
                                    "(BYTES is for remote and simulated models)"));
      }
      std::vector<int64_t> smallest = spec.shape;  // a free dimension counts as 1
      for (int64_t& d : smallest) d = std::max<int64_t>(d, 1);
      smallest.push_back(std::max<int64_t>(config.max_batch_size, 1));
      if (!protocol::ShapeElementCount(smallest, kMaxTensorElements)) {
        return Error(source, StrCat("'", spec.name, "' holds more than ", kMaxTensorElements,
                                    " elements in a full batch"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view PlatformName(Platform platform) {
  switch (platform) {
    case Platform::kTorchScript:
      return "torchscript";
    case Platform::kRemote:
      return "remote";
    case Platform::kSimulated:
      return "simulated";
    case Platform::kOpenAi:
      return "openai";
  }
  return "unknown";
}

bool IsValidModelName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

namespace {

// At most four model names, each once: a fallback chain is a short list of lighter models.
[[nodiscard]] absl::Status CheckFallback(const std::vector<std::string>& fallback,
                                         std::string_view source) {
  constexpr size_t kMaxFallbacks = 4;
  if (fallback.size() > kMaxFallbacks) {
    return Error(source, StrCat("fallback names at most ", kMaxFallbacks, " models"));
  }
  for (size_t i = 0; i < fallback.size(); ++i) {
    if (!IsValidModelName(fallback[i])) {
      return Error(source, StrCat("fallback '", fallback[i].substr(0, 64),
                                  "' is not a model name (letters, digits, '.', '_', '-')"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (fallback[j] == fallback[i]) {
        return Error(source, StrCat("fallback names '", fallback[i], "' twice"));
      }
    }
  }
  return absl::OkStatus();
}

// [remote], for the platforms served over the network, and what must be absent from the others.
[[nodiscard]] absl::Status ReadNetworkTables(const toml::table& root, std::string_view source,
                                             ModelConfig& config) {
  if (config.platform == Platform::kRemote || config.platform == Platform::kOpenAi) {
    // OpenAI-compatible servers have no readiness route of their own; the model list is the one
    // route they all answer.
    if (config.platform == Platform::kOpenAi) config.remote.health_check.path = "/v1/models";
    PILLAR_RETURN_IF_ERROR(ReadRemoteSection(root, source, config.remote));
    // The upstream batches and runs its own instances; [remote] sets the connections and queue.
    for (const char* table : {"batching", "instance"}) {
      if (root.contains(table)) {
        return Error(TomlWhere(source, root.get(table)),
                     StrCat("[", table, "] does not apply to platform = \"",
                            PlatformName(config.platform), "\""));
      }
    }
  } else if (root.contains("remote")) {
    return Error(TomlWhere(source, root.get("remote")),
                 "[remote] is only for platform = \"remote\" or \"openai\"");
  }
  if (config.platform == Platform::kRemote) {
    bool openai_keys =
        config.remote.api_key_header != "authorization" || !config.remote.api_version.empty();
    for (const RemoteEndpoint& endpoint : config.remote.endpoints) {
      openai_keys = openai_keys || !endpoint.model.empty();
    }
    if (openai_keys) {
      // The line of the first such key the [remote] table holds (an endpoint's model: the
      // endpoints' line).
      const toml::table& remote = *root.get("remote")->as_table();
      const toml::node* key = remote.get("api_key_header");
      if (key == nullptr) key = remote.get("api_version");
      if (key == nullptr) key = remote.get("endpoints");
      return Error(TomlWhere(source, key),
                   "[remote] api_key_header, api_version and an endpoint's model are only for "
                   "platform = \"openai\"");
    }
  }

  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadGenerationSection(const toml::table& root, std::string_view source,
                                                 GenerationConfig& out) {
  const toml::node* node = root.get("generation");
  if (node != nullptr && !node->is_table()) {
    return Error(source, "'generation' must be a table");
  }
  TomlSection section(node == nullptr ? nullptr : node->as_table(), "generation", source);
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_tokens", out.max_tokens, 1, 1 << 20));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_n", out.max_n, 1, 128));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("default_max_tokens", out.default_max_tokens, 0, out.max_tokens));
  return section.CheckNoUnknownKeys();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::Parse(std::string_view toml_text,
                                               std::string_view source) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table root, ParseToml(toml_text, source));
  ModelConfig config;
  // Strict reads: a misspelled or mistyped key in a model artifact is an error at load, never
  // a default that silently changes how the model is served.
  TomlSection top(&root, "model", source);
  if (!top.Contains("platform")) return Error(source, "model.platform is missing");
  PILLAR_RETURN_IF_ERROR(top.ReadEnum("platform", config.platform,
                                      {{"torchscript", Platform::kTorchScript},
                                       {"remote", Platform::kRemote},
                                       {"simulated", Platform::kSimulated},
                                       {"openai", Platform::kOpenAi}}));
  PILLAR_RETURN_IF_ERROR(top.ReadInt("max_batch_size", config.max_batch_size, 0, kMaxBatchSize));
  PILLAR_RETURN_IF_ERROR(top.ReadStrings("fallback", config.fallback));
  PILLAR_RETURN_IF_ERROR(CheckFallback(config.fallback, source));
  // [simulated] first: its api says whether the model has tensors at all.
  if (config.platform == Platform::kSimulated) {
    PILLAR_RETURN_IF_ERROR(ReadSimulatedSection(root, source, config.simulated));
  } else if (root.contains("simulated")) {
    return Error(source, "[simulated] is only for platform = \"simulated\"");
  }
  if (config.speaks_openai()) {
    if (root.contains("input") || root.contains("output") || config.max_batch_size != 0) {
      return Error(source,
                   "a language model (OpenAI API) has no [[input]], [[output]] or "
                   "max_batch_size: its requests and answers are OpenAI's");
    }
    PILLAR_RETURN_IF_ERROR(ReadGenerationSection(root, source, config.generation));
  } else if (root.contains("generation")) {
    return Error(source, "[generation] is only for a language model (OpenAI API)");
  } else {
    PILLAR_ASSIGN_OR_RETURN(config.inputs, ParseTensors(root, "input", source));
    PILLAR_ASSIGN_OR_RETURN(config.outputs, ParseTensors(root, "output", source));
    PILLAR_RETURN_IF_ERROR(CheckTensorSizes(config, source));
  }
  top.Allow("input");
  top.Allow("output");
  top.Allow("batching");
  top.Allow("instance");
  top.Allow("access");
  top.Allow("simulated");
  top.Allow("remote");
  top.Allow("generation");
  PILLAR_RETURN_IF_ERROR(top.CheckNoUnknownKeys());
  PILLAR_RETURN_IF_ERROR(ParseAccess(root, source, config.access));
  PILLAR_RETURN_IF_ERROR(ReadNetworkTables(root, source, config));

  for (const char* table : {"batching", "instance"}) {
    if (root.contains(table) && !root.get(table)->is_table()) {
      return Error(source, StrCat("'", table, "' must be a table"));
    }
  }
  TomlSection batching(root["batching"].as_table(), "batching", source);
  PILLAR_RETURN_IF_ERROR(
      batching.ReadInt("max_queue_delay_us", config.batching.max_queue_delay_us, 0, 10'000'000));
  PILLAR_RETURN_IF_ERROR(
      batching.ReadInt("max_queue_size", config.batching.max_queue_size, 1, 1 << 24));
  PILLAR_RETURN_IF_ERROR(batching.ReadBool("adaptive_delay", config.batching.adaptive_delay));
  PILLAR_RETURN_IF_ERROR(batching.CheckNoUnknownKeys());

  TomlSection instance(root["instance"].as_table(), "instance", source);
  PILLAR_RETURN_IF_ERROR(instance.ReadInt("count", config.instance.count, 1, kMaxInstances));
  std::string kind = "auto";
  PILLAR_RETURN_IF_ERROR(instance.ReadString("kind", kind));
  PILLAR_RETURN_IF_ERROR(instance.CheckNoUnknownKeys());
  if (kind == "auto") {
    config.instance.kind = DeviceKind::kAuto;
  } else if (kind == "cpu") {
    config.instance.kind = DeviceKind::kCpu;
  } else if (kind == "cuda") {
    config.instance.kind = DeviceKind::kCuda;
  } else {
    return Error(source, StrCat("instance.kind '", kind, "' is not one of auto, cpu, cuda"));
  }
  return config;
}

}  // namespace pillar::models
