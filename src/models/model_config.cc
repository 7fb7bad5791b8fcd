#include "models/model_config.h"

#include <set>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::models {
namespace {

constexpr int64_t kMaxBatchSize = 1 << 16;
constexpr int kMaxInstances = 64;

absl::Status Error(std::string_view source, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(source, ": ", what));
}

absl::StatusOr<std::vector<TensorSpec>> ParseTensors(const toml::table& root, std::string_view key,
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
    std::optional<std::string> name = (*table)["name"].value<std::string>();
    if (!name || name->empty()) return Error(source, StrCat("an ", key, " has no name"));
    spec.name = *name;
    if (!names.insert(spec.name).second) {
      return Error(source, StrCat(key, " '", spec.name, "' is declared twice"));
    }
    std::optional<std::string> type = (*table)["datatype"].value<std::string>();
    if (!type) return Error(source, StrCat(key, " '", spec.name, "' has no datatype"));
    absl::StatusOr<protocol::DataType> parsed = protocol::ParseDataType(*type);
    if (!parsed.ok())
      return Error(source, StrCat(key, " '", spec.name, "': ", parsed.status().message()));
    spec.datatype = *parsed;
    const toml::array* shape = (*table)["shape"].as_array();
    if (shape == nullptr) return Error(source, StrCat(key, " '", spec.name, "' has no shape"));
    for (const toml::node& dim : *shape) {
      std::optional<int64_t> d = dim.value<int64_t>();
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

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::Parse(std::string_view toml_text,
                                               std::string_view source) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table root, ParseToml(toml_text, source));
  ModelConfig config;
  config.platform = root["platform"].value_or<std::string>("");
  if (config.platform != "torchscript") {
    return Error(source, StrCat("platform '", config.platform,
                                "' is not supported (supported: torchscript)"));
  }
  config.max_batch_size = root["max_batch_size"].value_or<int64_t>(0);
  if (config.max_batch_size < 0 || config.max_batch_size > kMaxBatchSize) {
    return Error(source, StrCat("max_batch_size must be in [0, ", kMaxBatchSize, "]"));
  }
  PILLAR_ASSIGN_OR_RETURN(config.inputs, ParseTensors(root, "input", source));
  PILLAR_ASSIGN_OR_RETURN(config.outputs, ParseTensors(root, "output", source));

  config.batching.max_queue_delay_us = root["batching"]["max_queue_delay_us"].value_or<int64_t>(0);
  config.batching.max_queue_size = root["batching"]["max_queue_size"].value_or<int64_t>(1024);
  config.batching.adaptive_delay = root["batching"]["adaptive_delay"].value_or<bool>(true);
  if (config.batching.max_queue_delay_us < 0 || config.batching.max_queue_delay_us > 10'000'000) {
    return Error(source, "batching.max_queue_delay_us must be in [0, 10000000]");
  }
  if (config.batching.max_queue_size < 1)
    return Error(source, "batching.max_queue_size must be positive");

  config.instance.count = static_cast<int>(root["instance"]["count"].value_or<int64_t>(1));
  if (config.instance.count < 1 || config.instance.count > kMaxInstances) {
    return Error(source, StrCat("instance.count must be in [1, ", kMaxInstances, "]"));
  }
  std::string kind = root["instance"]["kind"].value_or<std::string>("auto");
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
