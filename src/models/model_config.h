// The contract of one model version, read from `<store>/<model>/<version>/model.toml`:
// platform, input and output signatures, batching and instance settings.
// The grammar is documented in docs/formats/model_store.md ("model.toml").
//
//   absl::StatusOr<ModelConfig> config = ModelConfig::Parse(text, "store/digits/1/model.toml");
//   if (config.ok()) { ... config->inputs[0].shape ... }
// A ModelConfig is an immutable value once parsed; share it freely between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/attributes.h"
#include "models/remote_config.h"
#include "models/simulated_config.h"
#include "protocol/datatype.h"

namespace pillar::models {

// One input or output. `shape` excludes the batch dimension when the model batches; -1 marks a
// dimension of any size.
struct TensorSpec {
  std::string name;
  protocol::DataType datatype = protocol::DataType::kFp32;
  std::vector<int64_t> shape;
};

struct BatchingConfig {
  // How long the first request of a batch may wait for others to join it.
  int64_t max_queue_delay_us = 0;
  // Requests waiting beyond this are refused with 503 and Retry-After.
  int64_t max_queue_size = 1024;
  // Wait for company only while another instance is executing (the model is under load); an
  // idle model runs a lone request at once. False always waits the full delay, as Triton does.
  bool adaptive_delay = true;
};

enum class DeviceKind { kAuto, kCpu, kCuda };

struct InstanceConfig {
  int count = 1;
  DeviceKind kind = DeviceKind::kAuto;
};

// What executes the model: LibTorch in process, other model servers over the network (Open
// Inference Protocol ones, or language models behind OpenAI-compatible APIs), or a simulation of
// a model server.
enum class Platform { kTorchScript, kRemote, kSimulated, kOpenAi };
std::string_view PlatformName(Platform platform);  // as model.toml spells it

// Model names as they appear in URLs: letters, digits, '-', '_', '.'; not starting with '.'.
bool IsValidModelName(std::string_view name);

// [generation], for a language model: bounds on what one call may ask of it, checked once the
// model is known (a request beyond them is refused with 400), and the completion length pillar
// asks for when a request names none (so that a token limit reserves a bounded amount).
struct GenerationConfig {
  int64_t max_tokens = 1 << 20;    // the largest max_tokens (or max_completion_tokens) allowed
  int64_t max_n = 8;               // the most choices per call
  int64_t default_max_tokens = 0;  // sent upstream when the request names none; 0: none is sent
};

struct ModelConfig {
  Platform platform = Platform::kTorchScript;
  // 0 disables batching: inputs then have exactly the declared shape.
  int64_t max_batch_size = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  BatchingConfig batching;
  InstanceConfig instance;
  // [access]: attributes that policy conditions read as model.<name>, e.g. tenant and
  // classification. "name" and "version" are reserved: the server sets them.
  Attributes access;
  // [simulated], read only when platform is kSimulated.
  SimulatedConfig simulated;
  // [remote], read only when platform is kRemote or kOpenAi.
  RemoteConfig remote;
  // [generation], read only for a language model (speaks_openai()).
  GenerationConfig generation;
  // `fallback = ["digits-lite"]`: the models that answer, in order, when this one cannot (its
  // breaker is open, its endpoints are out, it is overloaded, or it failed after its retries).
  // Each is authorized for the caller like any request; its own fallbacks are not followed.
  std::vector<std::string> fallback;

  // A language model, answered on the OpenAI-compatible routes (/v1/chat/completions ...) and not
  // on the Open Inference Protocol's: platform "openai", or a simulated one with api = "openai".
  // Served by other servers over the network: [remote] applies (and backends files).
  bool networked() const { return platform == Platform::kRemote || platform == Platform::kOpenAi; }
  bool speaks_openai() const {
    return platform == Platform::kOpenAi ||
           (platform == Platform::kSimulated && simulated.api == SimulatedApi::kOpenAi);
  }

  // Parses and validates a model.toml; `source` names the file in error messages.
  [[nodiscard]] static absl::StatusOr<ModelConfig> Parse(std::string_view toml_text,
                                                         std::string_view source);
};

}  // namespace pillar::models
