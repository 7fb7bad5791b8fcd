#include "models/backends_file.h"

#include "common/strings.h"
#include "common/toml_parse.h"
#include "models/model_config.h"

namespace pillar::models {

absl::StatusOr<BackendsFile> BackendsFile::Parse(std::string_view text, std::string_view source) {
  absl::StatusOr<toml::table> root = ParseToml(text, source);
  if (!root.ok()) return root.status();
  BackendsFile file;
  file.source_ = std::string(source);
  file.root_ = std::make_shared<const toml::table>(*std::move(root));
  for (const auto& [key, node] : *file.root_) {
    if (key.str() != "backends") {
      return absl::InvalidArgumentError(StrCat(source, ": unknown table or key '",
                                               std::string(key.str()).substr(0, 64),
                                               "' (only [backends.<model>] tables)"));
    }
    const toml::table* backends = node.as_table();
    if (backends == nullptr) {
      return absl::InvalidArgumentError(StrCat(source, ": 'backends' must be a table"));
    }
    for (const auto& [model, entry] : *backends) {
      const std::string name(model.str());
      if (!IsValidModelName(name)) {
        return absl::InvalidArgumentError(
            StrCat(source, ": [backends.", name.substr(0, 64), "] does not name a model"));
      }
      if (!entry.is_table()) {
        return absl::InvalidArgumentError(StrCat(source, ": backends.", name, " must be a table"));
      }
      // Checked now against the defaults, so that a typo is refused even for a model that is
      // not loaded; Apply() checks again against each version's own configuration.
      RemoteConfig probe;
      probe.endpoints.push_back({"http://placeholder", 1, 1, "", ""});
      if (absl::Status s =
              ApplyRemoteOverride(*entry.as_table(), StrCat("backends.", name), source, probe);
          !s.ok()) {
        return s;
      }
      file.tables_.emplace(name, entry.as_table());
    }
  }
  return file;
}

absl::StatusOr<RemoteConfig> BackendsFile::Apply(std::string_view model,
                                                 const RemoteConfig& signed_remote) const {
  auto it = tables_.find(model);
  if (it == tables_.end()) return signed_remote;
  RemoteConfig out = signed_remote;
  if (absl::Status s = ApplyRemoteOverride(*it->second, StrCat("backends.", model), source_, out);
      !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace pillar::models
