// The model store on disk: `<root>/<model>/<version>/{model.pt,model.toml}`, versions being
// positive integers, and `<root>/<model>/aliases.json`. Scanning applies each model's version
// policy and adds the versions its aliases name; it reads no version's files (model.toml is
// read by the loader, from the bytes it verified against the signature). A broken model is
// reported with its error, never fatal.
//
//   ModelRepository repo(root, VersionPolicy::Latest(), {}, trust);
//   for (const VersionEntry& v : repo.Scan().versions) Load(v);
// Scan() reads the filesystem and may be called from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_aliases.h"
#include "models/model_config.h"
#include "models/version_policy.h"

namespace pillar::models {

struct VersionEntry {
  std::string model;
  int64_t version = 0;
  std::filesystem::path directory;
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
  // Not OK when a directory of the store could not be listed for a shortage of the process or
  // the system (out of descriptors or memory): the scan does not say what the store holds, and
  // what is served must not change on it (ModelWatcher keeps it as it is). Any other error (a
  // permission, an I/O error) is the store's state, reported in model_errors: a directory that
  // cannot be listed has no versions, so that a writer of the store cannot freeze what is served
  // with one unlistable directory (review helper-56).
  absl::Status unreadable;
};

// The subject a version's signature must name: "<model>/<version>".
std::string VersionSubject(std::string_view model, int64_t version);

// The highest version number the store takes: room to add one without overflow, and more than
// any store will count to.
inline constexpr int64_t kMaxVersion = 999'999'999'999'999'999;

// A version directory's name: canonical decimal, 1 to kMaxVersion, no sign or leading zero, so
// that one version has one name ("01" and "1" would both be version 1, loaded twice).
std::optional<int64_t> ParseVersion(std::string_view name);

// The versions in a model directory, ascending: its subdirectories whose names ParseVersion
// takes (a link to a directory is not one). `error`, when given, is set when the directory
// could not be listed whole (what was listed is returned).
std::vector<int64_t> VersionsIn(const std::filesystem::path& model_dir,
                                std::error_code* error = nullptr);

class ModelRepository {
 public:
  ModelRepository(std::filesystem::path root, VersionPolicy default_policy,
                  std::map<std::string, VersionPolicy> policies, AliasTrust alias_trust = {});

  // `last_good`: the aliases in service now. A model whose aliases file is refused (unsigned,
  // forged, replayed, removed) keeps these, with the error reported, rather than losing its
  // routes to whoever wrote the file.
  ScanResult Scan(const ModelAliasTargets* last_good = nullptr) const;
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
  VersionPolicy default_policy_;
  std::map<std::string, VersionPolicy> policies_;
  AliasTrust alias_trust_;
};

}  // namespace pillar::models
