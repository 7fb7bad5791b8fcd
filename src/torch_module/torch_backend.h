// Loads a TorchScript model.pt as a Backend: the serving half of the LibTorch module
// (torch_module.h), reached by the binary only through that interface. This header is free of
// torch includes.
//
//   absl::StatusOr<std::unique_ptr<Backend>> b =
//       LoadTorchBackend(verified.contents.at("model.pt"), "store/digits/3/model.pt", config,
//       "cpu");
// The module is read from bytes in memory, never from a path: a server loads exactly the bytes
// it verified against the version's signature. Loading validates the module against the config
// by running one zero-filled row through it.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "models/model_config.h"
#include "runtime/backend.h"

namespace pillar::runtime {

// Process-wide LibTorch settings; the first call wins. `threads` is the intra-op thread count
// per model execution (1 suits many small models on few cores).
void ConfigureTorch(int threads);

// Whether a CUDA device is usable.
bool CudaAvailable();

// The description of the device chosen for `kind` ("cpu", "cuda:0").
[[nodiscard]] absl::StatusOr<std::string> ResolveDevice(models::DeviceKind kind);

// `model_bytes` is a TorchScript archive (torch.jit.save); `source` names it in messages. The
// bytes are not kept once the module is loaded.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> LoadTorchBackend(
    std::string_view model_bytes, std::string_view source, const models::ModelConfig& config,
    const std::string& device);

}  // namespace pillar::runtime
