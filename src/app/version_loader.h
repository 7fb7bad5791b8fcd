// Loads a version of the model store for serving: its files are read once, through
// descriptors that follow no links, checked against the version's signature (which must name
// this model and version), and then used from those same bytes: model.toml is parsed from them
// and the TorchScript module is built from them. Nothing is opened again by name afterwards, so
// a file swapped on disk at any moment changes nothing that is served: the version is served
// as signed, or not at all (R-SEC-1, R-SEC-2).
//
//   runtime::RunnerLoader loader = MakeVersionLoader({.require_signatures = true,
//                                                     .trusted = keys, .batch_sizes = family});
//   absl::StatusOr<runtime::LoadedVersion> v = loader(entry);
// The loader may be called from any thread; each call is independent.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "models/backends_file.h"
#include "monitor/metrics.h"
#include "runtime/model_registry.h"
#include "signing/signing_key.h"
#include "upstream/remote_runner.h"

namespace pillar::app {

struct VersionLoaderOptions {
  bool require_signatures = true;
  std::vector<signing::PublicKey> trusted;
  // pillar_batch_size{model,version}; null: not measured.
  monitor::Family<monitor::Histogram>* batch_sizes = nullptr;
  // Test seam (signing::VerifyOptions::after_read): runs after each file is read and hashed.
  std::function<void(std::string_view path)> after_read;
  // Told of every version whose signature verified for its own place (HighWaterMarks).
  std::function<void(std::string_view model, int64_t version)> verified;
  // What remote versions get from the server: metrics, its zone, the audit log.
  upstream::RemoteContext remote = {};
  // The backends file in service, applied to a remote version as it loads (null: none).
  std::function<std::shared_ptr<const models::BackendsFile>()> backends = {};
  // LibTorch's intra-op threads per model execution ([runtime] torch_threads), set when the
  // first TorchScript version loads the LibTorch module.
  int torch_threads = 1;
};

runtime::RunnerLoader MakeVersionLoader(VersionLoaderOptions options);

}  // namespace pillar::app
