#include "runtime/model_registry.h"

#include <algorithm>

#include "absl/strings/cord.h"

namespace pillar::runtime {

namespace {
constexpr absl::string_view kRetryPayload = "pillar.dev/retry-at-every-scan";
}  // namespace

[[nodiscard]] absl::Status RetryAtEveryScan(absl::Status status) {
  status.SetPayload(kRetryPayload, absl::Cord("1"));
  return status;
}

bool RetriedAtEveryScan(const absl::Status& status) {
  return absl::IsResourceExhausted(status) || status.GetPayload(kRetryPayload).has_value();
}

std::shared_ptr<const ModelRegistry> ModelRegistry::Build(models::ScanResult scan,
                                                          const RunnerLoader& loader,
                                                          const ModelRegistry* previous,
                                                          Versions* retired) {
  auto registry = std::make_shared<ModelRegistry>();
  std::vector<bool> kept(previous != nullptr ? previous->versions_.size() : 0, false);
  for (models::VersionEntry& entry : scan.versions) {
    if (previous != nullptr) {
      auto same =
          std::find_if(previous->versions_.begin(), previous->versions_.end(), [&](const auto& v) {
            return v->name == entry.model && v->version == entry.version &&
                   v->directory == entry.directory;
          });
      // A version that failed to load is tried again only when its files change, unless it
      // failed for a reason of the moment (RetriedAtEveryScan): that one is tried again now.
      if (same != previous->versions_.end() &&
          (((*same)->runner != nullptr && !(*same)->withdrawn()) ||
           ((*same)->stamp == entry.stamp && !RetriedAtEveryScan((*same)->status)))) {
        kept[size_t(same - previous->versions_.begin())] = true;
        registry->versions_.push_back(*same);
        continue;
      }
    }
    auto v = std::make_shared<ModelVersion>();
    v->name = entry.model;
    v->version = entry.version;
    v->version_text = std::to_string(entry.version);
    v->directory = entry.directory;
    v->stamp = entry.stamp;
    v->resource = "model:" + v->name + "/" + v->version_text;
    // [access] attributes come from the loaded (verified) model.toml only: a version that did
    // not load has none a policy could be fooled by.
    absl::StatusOr<LoadedVersion> loaded = loader(entry);
    if (loaded.ok()) {
      v->attributes = loaded->config.access;
      v->config = std::move(loaded->config);
      v->runner = std::move(loaded->runner);
      v->tokenizer = std::move(loaded->tokenizer);
      v->root_digest = std::move(loaded->root_digest);
    } else {
      v->status = loaded.status();
    }
    v->attributes["name"] = {v->name};
    v->attributes["version"] = {v->version_text};
    registry->versions_.push_back(std::move(v));
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!kept[i] && retired != nullptr) retired->push_back(previous->versions_[i]);
  }
  std::sort(registry->versions_.begin(), registry->versions_.end(),
            [](const auto& a, const auto& b) {
              return std::tie(a->name, a->version) < std::tie(b->name, b->version);
            });
  registry->aliases_ = std::move(scan.aliases);
  registry->model_errors_ = std::move(scan.model_errors);
  return registry;
}

const ModelVersion* ModelRegistry::AliasTarget(std::string_view model,
                                               std::string_view alias) const {
  auto m = aliases_.find(model);
  if (m == aliases_.end()) return nullptr;
  auto a = m->second.find(alias);
  if (a == m->second.end()) return nullptr;
  for (const auto& v : VersionsOf(model)) {
    if (v->version == a->second) return v.get();
  }
  return nullptr;
}

std::span<const std::shared_ptr<ModelVersion>> ModelRegistry::VersionsOf(
    std::string_view model) const {
  auto first = std::lower_bound(versions_.begin(), versions_.end(), model,
                                [](const auto& v, std::string_view m) { return v->name < m; });
  auto last = first;
  while (last != versions_.end() && (*last)->name == model) ++last;
  return {first, last};
}

bool ModelRegistry::AllReady() const {
  return std::all_of(versions_.begin(), versions_.end(), [](const auto& v) { return v->ready(); });
}

}  // namespace pillar::runtime
