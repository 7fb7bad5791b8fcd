// The models a server has at one moment: every version the repository scan chose, each either
// ready (with its Runner) or failed (with the reason), and the models' aliases. A registry is
// immutable once built, so lookups need no lock; a store change builds the next one (reusing
// the versions both have) and ModelCatalog publishes it. Requests hold the snapshot they
// started with, so a version leaves only when its last request is done.
//
//   auto registry = ModelRegistry::Build(repo.Scan(), loader, nullptr);
//   for (const auto& v : registry->VersionsOf("digits")) { ... v->ready() ... }
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/attributes.h"
#include "models/model_config.h"
#include "models/model_repository.h"
#include "protocol/bpe_tokenizer.h"
#include "runtime/runner.h"

namespace pillar::runtime {

struct ModelVersion {
  std::string name;
  int64_t version = 0;
  std::string version_text;
  std::filesystem::path directory;
  absl::Status status;  // OK when loaded and ready
  std::optional<models::ModelConfig> config;
  // What policy conditions see as model.<name>: the [access] table plus name and version.
  Attributes attributes;
  // The policy resource, "model:<name>/<version>".
  std::string resource;
  int64_t stamp = 0;  // models::VersionEntry::stamp when loaded
  // The signed root digest of what was loaded; empty when signatures are not required.
  std::string root_digest;
  std::unique_ptr<Runner> runner;
  // A language model's tokenizer (its signed tokenizer.tiktoken), which counts its prompts on
  // arrival; null: the estimator counts them.
  std::shared_ptr<const protocol::BpeTokenizer> tokenizer;

  bool ready() const { return status.ok() && runner != nullptr && runner->Ready() && !withdrawn(); }

  // Takes a loaded version out of service for good (its files no longer verify): requests
  // route to other versions from now on. Thread-safe; the first reason wins.
  void Withdraw(std::string reason) {
    bool expected = false;
    if (!withdrawing_.compare_exchange_strong(expected, true)) return;
    withdrawn_reason_ = std::move(reason);
    withdrawn_.store(true, std::memory_order_release);
  }
  bool withdrawn() const { return withdrawn_.load(std::memory_order_acquire); }
  // Why the version is not ready: the withdrawal reason, else the load error.
  std::string_view Reason() const {
    if (withdrawn()) return withdrawn_reason_;
    return std::string_view(status.message().data(), status.message().size());
  }

  // What a later layer keeps for exactly as long as this version lives: the observe stage's
  // series of the version's metrics, which so leave /metrics with the version (a server whose
  // store takes a version a day kept a series of each for good). One keeper, `owner`: the first
  // call makes what is kept with `make`; a call by another owner gets null. Thread-safe.
  class Kept {
   public:
    virtual ~Kept() = default;
  };
  Kept* KeptBy(const void* owner, absl::FunctionRef<std::unique_ptr<Kept>()> make) const {
    absl::call_once(kept_once_, [&] {
      kept_owner_ = owner;
      kept_ = make();
    });
    return kept_owner_ == owner ? kept_.get() : nullptr;
  }

 private:
  mutable absl::once_flag kept_once_;
  mutable const void* kept_owner_ = nullptr;  // written once, under kept_once_
  mutable std::unique_ptr<Kept> kept_;
  std::atomic<bool> withdrawing_{false};
  std::atomic<bool> withdrawn_{false};
  std::string withdrawn_reason_;  // written once, before withdrawn_ turns true
};

// What a loader makes of a version: its contract, parsed from the very bytes that were
// verified, and a runner built from the verified weights.
struct LoadedVersion {
  models::ModelConfig config;
  std::unique_ptr<Runner> runner;
  std::string root_digest;  // empty when signatures are not required
  std::shared_ptr<const protocol::BpeTokenizer> tokenizer;  // a language model's, if it has one
};

using RunnerLoader = std::function<absl::StatusOr<LoadedVersion>(const models::VersionEntry&)>;

// A loader's error that the next scan should try again even though the version's files have not
// changed: a shortage of the moment (ResourceExhausted: descriptors, memory), or what `status`
// says once marked by RetryAtEveryScan (a version the operator's backends file does not fit
// yet: fixing the file must bring it up).
[[nodiscard]] absl::Status RetryAtEveryScan(absl::Status status);
bool RetriedAtEveryScan(const absl::Status& status);

class ModelRegistry {
 public:
  using Versions = std::vector<std::shared_ptr<ModelVersion>>;

  // Loads every scanned version with `loader`; failures are recorded, never fatal. Versions of
  // `previous` that the scan still names are taken over as they are (a ready one is not loaded
  // again; a failed one is retried only when its stamp moved, or RetriedAtEveryScan); the ones it
  // no longer names are appended to `retired`, when given.
  static std::shared_ptr<const ModelRegistry> Build(models::ScanResult scan,
                                                    const RunnerLoader& loader,
                                                    const ModelRegistry* previous,
                                                    Versions* retired = nullptr);

  // The version `alias` of `model` names; null when there is no such alias.
  const ModelVersion* AliasTarget(std::string_view model, std::string_view alias) const;
  // The versions of one model, ascending; empty when unknown.
  std::span<const std::shared_ptr<ModelVersion>> VersionsOf(std::string_view model) const;
  const Versions& versions() const { return versions_; }
  const models::ModelAliasTargets& aliases() const { return aliases_; }
  const std::vector<std::pair<std::string, absl::Status>>& model_errors() const {
    return model_errors_;
  }
  // True when every version loaded.
  bool AllReady() const;

 private:
  Versions versions_;  // sorted by name, then version
  models::ModelAliasTargets aliases_;
  std::vector<std::pair<std::string, absl::Status>> model_errors_;
};

}  // namespace pillar::runtime
