#include "models/repository_options.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "models/model_aliases.h"

namespace pillar::models {
namespace {

[[nodiscard]] absl::Status ReadPolicies(const toml::node_view<const toml::node> node,
                                        std::string_view source,
                                        std::map<std::string, VersionPolicy>& out) {
  if (!node) return absl::OkStatus();
  const toml::table* policies = node.as_table();
  if (policies == nullptr) {
    return absl::InvalidArgumentError(StrCat(source, ": [repository] policies must be a table"));
  }
  for (const auto& [model, policy] : *policies) {
    if (!policy.is_string()) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [repository.policies] ", model.str(), " must be a string"));
    }
    absl::StatusOr<VersionPolicy> parsed = VersionPolicy::Parse(policy.as_string()->get());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [repository.policies] ", model.str(), ": ", parsed.status().message()));
    }
    out.insert_or_assign(std::string(model.str()), *std::move(parsed));
  }
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<RepositoryOptions> ReadRepositorySection(const toml::table& root,
                                                                      std::string_view source,
                                                                      const std::string& base) {
  RepositoryOptions options;
  TomlSection s(root["repository"].as_table(), "repository", source);
  PILLAR_RETURN_IF_ERROR(s.ReadPath("path", options.path, base));
  std::string policy = options.version_policy.ToString();
  PILLAR_RETURN_IF_ERROR(s.ReadString("version_policy", policy));
  absl::StatusOr<VersionPolicy> parsed = VersionPolicy::Parse(policy);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [repository] version_policy: ", parsed.status().message()));
  }
  options.version_policy = *std::move(parsed);
  s.Allow("policies");
  PILLAR_RETURN_IF_ERROR(
      ReadPolicies(root["repository"]["policies"], source, options.model_policies));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("require_signatures", options.require_signatures));
  PILLAR_RETURN_IF_ERROR(s.ReadPaths("trusted_keys", options.trusted_keys, base));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("signing_key", options.signing_key, base));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("reverify_interval_ms", options.reverify_interval, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("poll_ms", options.poll, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadString("default_alias", options.default_alias));
  if (!options.default_alias.empty() && !IsValidAliasName(options.default_alias)) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [repository] default_alias '", options.default_alias,
               "': 1 to 64 of a-z, 0-9, '_', '-', starting with a letter"));
  }
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  return options;
}

}  // namespace pillar::models
