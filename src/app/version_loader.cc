#include "app/version_loader.h"

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "models/model_repository.h"
#include "protocol/bpe_tokenizer.h"
#include "runtime/batching_runner.h"
#include "runtime/latency_histogram.h"
#include "runtime/simulated_backend.h"
#include "runtime/simulated_llm_runner.h"
#include "signing/model_manifest.h"
#include "torch_module/torch_module.h"
#include "upstream/remote_runner.h"

namespace pillar::app {
namespace {

constexpr std::string_view kConfigFile = "model.toml";
constexpr std::string_view kWeightsFile = "model.pt";

// A version's model instances, and where they run ("cpu", "cuda:0", "simulation").
struct Instances {
  std::vector<std::unique_ptr<runtime::Backend>> backends;
  std::string where;
};
// A file of the version, as read (and verified) once.
using FileLookup = std::function<absl::StatusOr<std::string_view>(std::string_view name)>;

// Loads the LibTorch module on the first TorchScript version, not at start: commands and
// servers that load no model never pay LibTorch's start-up.
[[nodiscard]] absl::StatusOr<Instances> TorchInstances(const VersionLoaderOptions& options,
                                                       const models::ModelConfig& config,
                                                       const std::string& dir,
                                                       const FileLookup& file) {
  absl::StatusOr<std::string_view> weights = file(kWeightsFile);
  if (!weights.ok()) return weights.status();
  absl::StatusOr<torch_module::TorchModule*> torch = torch_module::LoadTorchModule();
  if (!torch.ok())
    return absl::Status(torch.status().code(), StrCat(dir, ": ", torch.status().message()));
  (*torch)->ConfigureThreads(options.torch_threads);
  absl::StatusOr<std::string> device = (*torch)->ResolveDevice(config.instance.kind);
  if (!device.ok()) return device.status();
  const std::string weights_source = StrCat(dir, "/", kWeightsFile);
  Instances instances;
  instances.where = *device;
  for (int i = 0; i < config.instance.count; ++i) {
    absl::StatusOr<std::unique_ptr<runtime::Backend>> backend =
        (*torch)->LoadBackend(*weights, weights_source, config, *device);
    if (!backend.ok()) return backend.status();
    instances.backends.push_back(std::move(*backend));
  }
  return instances;
}

[[nodiscard]] absl::StatusOr<Instances> SimulatedInstances(const models::ModelConfig& config,
                                                           const std::string& dir,
                                                           const FileLookup& file) {
  std::optional<runtime::LatencyHistogram> histogram;
  if (config.simulated.latency == models::LatencyDistribution::kEmpirical) {
    const std::string_view name = models::SimulatedConfig::kHistogramFile;
    absl::StatusOr<std::string_view> text = file(name);
    if (!text.ok()) return text.status();
    absl::StatusOr<runtime::LatencyHistogram> parsed =
        runtime::LatencyHistogram::Parse(*text, StrCat(dir, "/", name));
    if (!parsed.ok()) return parsed.status();
    histogram = std::move(*parsed);
  }
  Instances instances;
  instances.where = "simulation";
  for (int i = 0; i < config.instance.count; ++i) {
    instances.backends.push_back(std::make_unique<runtime::SimulatedBackend>(config, histogram, i));
  }
  return instances;
}

// A remote version's runner: the upstream batches and runs the model; pillar keeps connections
// to it. The operator's backends file applies over the signed [remote]; the version keeps its
// signed configuration, so that a later file is applied to that, not to this. A version the file
// does not fit is not served, and is tried again at each scan until the file fits it: serving it
// by its signed [remote] instead brought back endpoints the operator had taken out of the file,
// over one key of the file unrelated to them (review helper-126).
[[nodiscard]] absl::StatusOr<std::unique_ptr<runtime::Runner>> RemoteRunnerFor(
    const VersionLoaderOptions& options, const models::VersionEntry& entry, const std::string& dir,
    const models::ModelConfig& config) {
  models::ModelConfig serving = config;
  if (options.backends) {
    absl::StatusOr<models::RemoteConfig> applied =
        options.backends()->Apply(entry.model, config.remote);
    if (!applied.ok()) {
      return runtime::RetryAtEveryScan(absl::FailedPreconditionError(StrCat(
          dir, ": the backends file does not fit this version, which is not served until it ",
          "does: ", applied.status().message())));
    }
    serving.remote = std::move(*applied);
  }
  absl::StatusOr<std::unique_ptr<upstream::RemoteRunner>> remote = upstream::RemoteRunner::Create(
      serving, entry.model, std::to_string(entry.version), options.remote);
  if (!remote.ok()) {
    return absl::Status(remote.status().code(), StrCat(dir, ": ", remote.status().message()));
  }
  const size_t n = serving.remote.endpoints.size();
  std::fprintf(stderr, "pillar: loaded %s version %lld from %zu upstream endpoint%s\n",
               entry.model.c_str(), static_cast<long long>(entry.version), n, n == 1 ? "" : "s");
  return std::unique_ptr<runtime::Runner>(std::move(*remote));
}

// A language model's tokenizer.tiktoken, when its version has one (null when not).
[[nodiscard]] absl::StatusOr<std::shared_ptr<const protocol::BpeTokenizer>> TokenizerOf(
    const std::string& dir, const std::map<std::string, std::string, std::less<>>& contents,
    const models::ModelConfig& config) {
  auto it = contents.find(protocol::BpeTokenizer::kFileName);
  if (it == contents.end() || !config.speaks_openai()) return nullptr;
  return protocol::BpeTokenizer::Parse(it->second,
                                       StrCat(dir, "/", protocol::BpeTokenizer::kFileName));
}

[[nodiscard]] absl::StatusOr<runtime::LoadedVersion> Load(const VersionLoaderOptions& options,
                                                          const models::VersionEntry& entry) {
  const std::string dir = entry.directory.string();
  // Every file a platform may need, read (and checked) once; a platform's absent file is absent.
  const std::vector<std::string> wanted = {std::string(kConfigFile), std::string(kWeightsFile),
                                           std::string(models::SimulatedConfig::kHistogramFile),
                                           std::string(protocol::BpeTokenizer::kFileName)};
  std::map<std::string, std::string, std::less<>> contents;
  std::string root_digest;
  if (options.require_signatures) {
    if (options.trusted.empty()) {
      return absl::FailedPreconditionError(
          "signatures are required ([repository] require_signatures) but no trusted_keys are "
          "configured");
    }
    absl::StatusOr<signing::VerifiedModel> verified =
        signing::VerifyModel(dir, options.trusted,
                             {.expected_name = models::VersionSubject(entry.model, entry.version),
                              .keep = wanted,
                              .after_read = options.after_read});
    if (!verified.ok()) {
      return absl::Status(verified.status().code(),
                          StrCat("signature check failed: ", verified.status().message()));
    }
    contents = std::move(verified->contents);
    root_digest = std::move(verified->root_digest);
    if (options.verified) options.verified(entry.model, entry.version);
  } else {
    absl::StatusOr<std::map<std::string, std::string, std::less<>>> read =
        signing::ReadModelFiles(dir, wanted);
    if (!read.ok()) return read.status();
    contents = std::move(*read);
  }
  auto file = [&](std::string_view name) -> absl::StatusOr<std::string_view> {
    auto it = contents.find(name);
    if (it != contents.end()) return std::string_view(it->second);
    return absl::NotFoundError(
        StrCat(dir, ": no ", name, options.require_signatures ? " among the signed files" : ""));
  };
  absl::StatusOr<std::string_view> toml = file(kConfigFile);
  if (!toml.ok()) return toml.status();
  absl::StatusOr<models::ModelConfig> config =
      models::ModelConfig::Parse(*toml, StrCat(dir, "/", kConfigFile));
  if (!config.ok()) return config.status();
  runtime::LoadedVersion loaded;
  loaded.root_digest = std::move(root_digest);
  PILLAR_ASSIGN_OR_RETURN(loaded.tokenizer, TokenizerOf(dir, contents, *config));
  if (config->speaks_openai() && config->platform == models::Platform::kSimulated) {
    loaded.runner = std::make_unique<runtime::SimulatedLlmRunner>(*config);
    std::fprintf(stderr, "pillar: loaded %s version %lld, a simulated language model\n",
                 entry.model.c_str(), static_cast<long long>(entry.version));
    loaded.config = std::move(*config);
    return loaded;
  }
  if (config->networked()) {
    absl::StatusOr<std::unique_ptr<runtime::Runner>> remote =
        RemoteRunnerFor(options, entry, dir, *config);
    if (!remote.ok()) return remote.status();
    loaded.runner = std::move(*remote);
    loaded.config = std::move(*config);
    return loaded;
  }
  absl::StatusOr<Instances> instances = config->platform == models::Platform::kSimulated
                                            ? SimulatedInstances(*config, dir, file)
                                            : TorchInstances(options, *config, dir, file);
  if (!instances.ok()) return instances.status();
  contents.clear();  // what the instances need, they hold now
  std::fprintf(stderr, "pillar: loaded %s version %lld on %s (%d instance%s)\n",
               entry.model.c_str(), static_cast<long long>(entry.version), instances->where.c_str(),
               config->instance.count, config->instance.count == 1 ? "" : "s");
  // Held by the runner: the series leaves /metrics with the version (review helper-137).
  std::shared_ptr<monitor::Histogram> batch_sizes =
      options.batch_sizes == nullptr
          ? nullptr
          : options.batch_sizes->Hold({entry.model, std::to_string(entry.version)});
  loaded.runner = std::make_unique<runtime::BatchingRunner>(*config, std::move(instances->backends),
                                                            SystemClock(), std::move(batch_sizes));
  loaded.config = std::move(*config);
  return loaded;
}

}  // namespace

runtime::RunnerLoader MakeVersionLoader(VersionLoaderOptions options) {
  return [options = std::move(options)](const models::VersionEntry& entry) {
    return Load(options, entry);
  };
}

}  // namespace pillar::app
