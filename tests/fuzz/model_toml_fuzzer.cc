// Fuzzes model.toml parsing: a model artifact on disk is untrusted input.
#include <cstdint>
#include <string_view>

#include "models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<pillar::models::ModelConfig> config = pillar::models::ModelConfig::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (config.ok() && (config->inputs.empty() || config->outputs.empty())) __builtin_trap();
  return 0;
}
