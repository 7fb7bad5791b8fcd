// The [repository] section of pillar.toml: where the model store is, which versions of each
// model are served, and which keys a version or an alias file must be signed by. Each key is
// described in docs/configuration.md.
//
//   PILLAR_ASSIGN_OR_RETURN(models::RepositoryOptions repository,
//                           models::ReadRepositorySection(root, "pillar.toml", base));
#pragma once

#include <toml++/toml.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/version_policy.h"

namespace pillar::models {

struct RepositoryOptions {
  std::string path = "models";
  VersionPolicy version_policy = VersionPolicy::Latest();
  std::map<std::string, VersionPolicy> model_policies;  // by model; the others get version_policy
  // Only versions whose model.sig.json verifies against one of these public keys are served.
  bool require_signatures = true;
  std::vector<std::string> trusted_keys;
  // The private key `pillar model push|promote|rollback` sign versions and alias files with
  // (their --key overrides it); the server never reads it. Empty: give --key.
  std::string signing_key;
  absl::Duration reverify_interval = absl::Minutes(1);  // zero: verify only at load
  absl::Duration poll = absl::Seconds(1);  // how often the store is scanned for changes
  std::string default_alias = "prod";      // where requests without a version go, when it exists
};

// Relative paths are taken from `base`.
[[nodiscard]] absl::StatusOr<RepositoryOptions> ReadRepositorySection(const toml::table& root,
                                                                      std::string_view source,
                                                                      const std::string& base);

}  // namespace pillar::models
