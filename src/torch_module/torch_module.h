// Everything pillar does with LibTorch, behind one versioned interface: TorchScript backends
// for serving, `pillar train`, and `pillar ckpt export`. The implementation lives in a module,
// libpillar_torch.so, loaded with dlopen the first time a command needs it (the way NVML is
// loaded by `pillar health`), so the binary starts without LibTorch: its static initialisation
// cost over a second at every start, and a command that needs no model should not pay it.
//
//   absl::StatusOr<TorchModule*> torch = LoadTorchModule();
//   if (!torch.ok()) return torch.status();   // names the module and where it was looked for
//   auto backend = (*torch)->LoadBackend(bytes, "store/digits/3/model.pt", config, "cpu");
//
// The module is found at $PILLAR_TORCH_MODULE when set, else next to the running binary, else
// in ../lib/pillar/ beside it. The types that cross this interface (ModelConfig, Backend,
// LoadedCheckpoint, TrainOptions) are shared with the binary by layout, so a module is used
// only by the binary of its own version and interface number (kModuleAbiVersion, raised with
// any change to this file or to those types).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/checkpoint_io.h"
#include "models/model_config.h"
#include "runtime/backend.h"

namespace pillar::torch_module {

inline constexpr int kModuleAbiVersion =
    2;  // 2: ModelConfig::platform and simulated, Backend::Interrupt
// The one symbol the module exports: `extern "C" TorchModule* pillar_torch_module_v1()`.
inline constexpr char kEntryPoint[] = "pillar_torch_module_v1";
inline constexpr char kModuleFileName[] = "libpillar_torch.so";

// `pillar train`: the demo digits MLP with checkpoints (docs/checkpoints.md).
struct TrainOptions {
  std::string run;      // the fast tier
  std::string durable;  // optional second tier
  std::string data = "models/demo/heldout.csv";
  int64_t steps = 600;
  int64_t every = 50;  // checkpoint every this many steps
  uint64_t seed = 7;
  int64_t batch = 32;
  double lr = 0.05;
  double momentum = 0.9;
  bool sync = false;  // wait for each checkpoint to be written before the next step
  int keep_last = 3;
};

class TorchModule {
 public:
  virtual ~TorchModule() = default;

  virtual int abi_version() const = 0;
  // The pillar version the module was built from; must equal the binary's.
  virtual std::string_view pillar_version() const = 0;

  // Process-wide LibTorch settings: the intra-op thread count per model execution (1 suits
  // many small models on few cores). The first call wins; call before loading models.
  virtual void ConfigureThreads(int threads) = 0;
  virtual bool CudaAvailable() = 0;
  // The device chosen for `kind` ("cpu", "cuda:0").
  [[nodiscard]] virtual absl::StatusOr<std::string> ResolveDevice(models::DeviceKind kind) = 0;
  // A TorchScript module read from `model_bytes` (never from a path: a server loads exactly
  // the bytes it verified), checked against `config` by running one zero-filled row.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<runtime::Backend>> LoadBackend(
      std::string_view model_bytes, std::string_view source, const models::ModelConfig& config,
      const std::string& device) = 0;

  // `pillar train`; returns the process exit code.
  virtual int Train(const TrainOptions& options) = 0;
  // `pillar ckpt export`: a checkpoint as a state_dict file torch.load reads.
  [[nodiscard]] virtual absl::Status ExportStateDict(const ckpt::LoadedCheckpoint& checkpoint,
                                                     const std::string& path) = 0;
};

// Loads the module once per process (later calls return the same module, or the same error).
// FailedPrecondition naming every path tried when there is none, and the module's own error
// when it does not load or is of another version.
[[nodiscard]] absl::StatusOr<TorchModule*> LoadTorchModule();

// Loads the module at `path`, uncached (tests).
[[nodiscard]] absl::StatusOr<TorchModule*> LoadTorchModuleFrom(const std::string& path);

}  // namespace pillar::torch_module
