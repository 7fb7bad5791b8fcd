// The model store on disk: `<root>/<model>/<version>/{model.pt,model.toml}`, versions being
// positive integers. Scanning applies each model's version policy and reads each chosen
// version's model.toml; a broken version is reported with its error, never fatal.
//
//   ModelRepository repo(root, VersionPolicy::Latest(), {});
//   for (const VersionEntry& v : repo.Scan()) { if (v.config.ok()) Load(v); }
// Scan() reads the filesystem and may be called from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
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
};

struct ScanResult {
  std::vector<VersionEntry> versions;
  // Problems that are not a version's own: unreadable store, a model with no versions.
  std::vector<std::pair<std::string, absl::Status>> model_errors;
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
