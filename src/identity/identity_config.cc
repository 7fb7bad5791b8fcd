#include "identity/identity_config.h"

#include <vector>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::identity {

[[nodiscard]] absl::StatusOr<std::optional<JwtOptions>> ReadJwtSection(const toml::table& root,
                                                                       std::string_view source,
                                                                       const std::string& base) {
  JwtOptions jwt;
  TomlSection s(root["jwt"].as_table(), "jwt", source);
  PILLAR_RETURN_IF_ERROR(s.ReadPath("jwks", jwt.jwks_path, base));
  PILLAR_RETURN_IF_ERROR(s.ReadString("issuer", jwt.issuer));
  PILLAR_RETURN_IF_ERROR(s.ReadStrings("audiences", jwt.audiences));
  int64_t clock_skew_s = absl::ToInt64Seconds(jwt.clock_skew);
  PILLAR_RETURN_IF_ERROR(s.ReadInt("clock_skew_s", clock_skew_s, 0, 3600));
  jwt.clock_skew = absl::Seconds(clock_skew_s);
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("reload_ms", jwt.reload_interval, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadString("subject_claim", jwt.subject_claim));
  PILLAR_RETURN_IF_ERROR(s.ReadString("tenant_claim", jwt.tenant_claim));
  PILLAR_RETURN_IF_ERROR(s.ReadString("roles_claim", jwt.roles_claim));
  std::map<std::string, std::vector<std::string>> attributes;
  PILLAR_RETURN_IF_ERROR(s.ReadStringTable("attributes", attributes));
  for (auto& [name, claims] : attributes) {
    if (claims.size() != 1) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [jwt] attributes.", name, " must name one claim"));
    }
    jwt.attribute_claims[name] = claims[0];
  }
  PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  if (jwt.jwks_path.empty()) return std::nullopt;
  if (jwt.issuer.empty() || jwt.audiences.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [jwt] needs issuer and audiences along with jwks"));
  }
  return jwt;
}

[[nodiscard]] absl::StatusOr<std::map<std::string, CertificateClient>> ReadCertificateClients(
    const toml::table& root, std::string_view source) {
  std::map<std::string, CertificateClient> clients;
  const toml::array* tables = root["mtls_client"].as_array();
  if (tables == nullptr) return clients;
  for (const toml::node& node : *tables) {
    TomlSection s(node.as_table(), "mtls_client", source);
    std::string identity;
    CertificateClient client;
    std::map<std::string, std::vector<std::string>> attributes;
    PILLAR_RETURN_IF_ERROR(s.ReadString("identity", identity));
    PILLAR_RETURN_IF_ERROR(s.ReadString("tenant", client.tenant));
    PILLAR_RETURN_IF_ERROR(s.ReadStrings("roles", client.roles));
    PILLAR_RETURN_IF_ERROR(s.ReadStringTable("attributes", attributes));
    PILLAR_RETURN_IF_ERROR(s.ReadStrings("listeners", client.listeners));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    for (const std::string& listener : client.listeners) {
      if (listener != "data" && listener != "admin") {
        return absl::InvalidArgumentError(StrCat(source, ": [[mtls_client]] '", identity,
                                                 "': listeners holds '", listener,
                                                 "'; the listeners are \"data\" and \"admin\""));
      }
    }
    if (identity.empty()) {
      return absl::InvalidArgumentError(StrCat(source, ": [[mtls_client]] needs identity"));
    }
    for (auto& [attribute, values] : attributes) client.attributes[attribute] = std::move(values);
    if (!clients.emplace(identity, std::move(client)).second) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [[mtls_client]] '", identity, "' is listed twice"));
    }
  }
  return clients;
}

}  // namespace pillar::identity
