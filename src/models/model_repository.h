// The model store on disk: `<root>/<model>/<version>/{model.pt,model.toml}`, versions being
// positive integers, and `<root>/<model>/aliases.json`. Scanning applies each model's version
// policy, adds the versions its aliases name, and reads each chosen version's model.toml; a
// broken version is reported with its error, never fatal.
//
//   ModelRepository repo(root, VersionPolicy::Latest(), {});
//   for (const VersionEntry& v : repo.Scan()) { if (v.config.ok()) Load(v); }
// Scan() reads the filesystem and may be called from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_config.h"
#include "models/version_policy.h"

namespace pillar::models {

struct VersionEntry {
  std::string model;
  int64_t version = 0;
  std::filesystem::path directory;
  absl::StatusOr<ModelConfig> config;  // the parse error when model.toml is missing or bad
  // Changes when the version's directory, model.toml or signature changes: a server retries a
  // version that failed to load only when its stamp moved.
  int64_t stamp = 0;
};

// Each model's aliases and the versions they name. Transparent comparators: the route stage
// looks aliases up by string_view on every request without building a string.
using AliasTargets = std::map<std::string, int64_t, std::less<>>;
using ModelAliasTargets = std::map<std::string, AliasTargets, std::less<>>;

struct ScanResult {
  std::vector<VersionEntry> versions;
  // Problems that are not a version's own: unreadable store, a model with no versions.
  std::vector<std::pair<std::string, absl::Status>> model_errors;
  // Each model's aliases (aliases.json); their targets are scanned whatever the version policy.
  ModelAliasTargets aliases;
};

class ModelRepository {
 public:
  ModelRepository(std::filesystem::path root, VersionPolicy default_policy,
                  std::map<std::string, VersionPolicy> policies);

  ScanResult Scan() const;
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
  VersionPolicy default_policy_;
  std::map<std::string, VersionPolicy> policies_;
};

// Model names as they appear in URLs: letters, digits, '-', '_', '.'; not starting with '.'.
bool IsValidModelName(std::string_view name);

}  // namespace pillar::models
