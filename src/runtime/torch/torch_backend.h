// Loads a TorchScript model.pt as a Backend. This header is free of torch includes; only
// torch_backend.cc includes LibTorch, so the rest of pillar compiles without it.
//
//   absl::StatusOr<std::unique_ptr<Backend>> b = LoadTorchBackend(dir / "model.pt", config);
// Loading validates the module against the config by running one zero-filled row through it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/model_config.h"
#include "runtime/backend.h"

namespace pillar::runtime {

// Process-wide LibTorch settings; call once before loading models. `threads` is the intra-op
// thread count per model execution (1 suits many small models on few cores).
void ConfigureTorch(int threads);

// Whether this build can run TorchScript models, and whether a CUDA device is usable.
bool TorchAvailable();
bool CudaAvailable();

// The description of the device chosen for `kind` ("cpu", "cuda:0").
absl::StatusOr<std::string> ResolveDevice(models::DeviceKind kind);

absl::StatusOr<std::unique_ptr<Backend>> LoadTorchBackend(const std::filesystem::path& model_file,
                                                          const models::ModelConfig& config,
                                                          const std::string& device);

}  // namespace pillar::runtime
