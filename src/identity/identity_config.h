// The identity sections of pillar.toml: [jwt] (tokens from an identity provider, off unless
// jwks is set) and [[mtls_client]] (what a client certificate's identity maps to). Each key is
// described in docs/configuration.md.
//
//   PILLAR_ASSIGN_OR_RETURN(std::optional<identity::JwtOptions> jwt,
//                           identity::ReadJwtSection(root, "pillar.toml", base));
#pragma once

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "identity/authenticator.h"
#include "identity/jwt_verifier.h"

namespace pillar::identity {

// Nullopt when [jwt] sets no jwks: tokens are then not accepted. Relative paths are taken from
// `base`.
[[nodiscard]] absl::StatusOr<std::optional<JwtOptions>> ReadJwtSection(const toml::table& root,
                                                                       std::string_view source,
                                                                       const std::string& base);

// Every [[mtls_client]] table, by identity.
[[nodiscard]] absl::StatusOr<std::map<std::string, CertificateClient>> ReadCertificateClients(
    const toml::table& root, std::string_view source);

}  // namespace pillar::identity
