#include "identity/authenticator.h"

#include <algorithm>

#include "common/strings.h"
#include "identity/api_key.h"

namespace pillar::identity {

Authenticator::Authenticator(const ApiKeyTable* keys, const JwtVerifier* jwt,
                             const std::map<std::string, CertificateClient>& certificate_clients)
    : keys_(keys), jwt_(jwt) {
  for (const auto& [identity, client] : certificate_clients) {
    auto principal = std::make_shared<Principal>();
    principal->method = AuthMethod::kMtls;
    principal->id = StrCat("mtls:", identity);
    principal->tenant = client.tenant;
    principal->roles = client.roles;
    principal->attributes = client.attributes;
    certificate_clients_.emplace(identity, Mapped{std::move(principal), client.listeners});
  }
}

absl::StatusOr<std::shared_ptr<const Principal>> Authenticator::Authenticate(
    std::string_view authorization, std::string_view peer_identity, std::string_view listener,
    int64_t now_us) const {
  if (authorization.empty()) {
    if (peer_identity.empty()) return absl::UnauthenticatedError("missing Authorization header");
    auto it = certificate_clients_.find(ToAbsl(peer_identity));
    const bool here = it != certificate_clients_.end() &&
                      (it->second.listeners.empty() ||
                       std::find(it->second.listeners.begin(), it->second.listeners.end(),
                                 listener) != it->second.listeners.end());
    if (!here) {
      return absl::UnauthenticatedError(
          StrCat("client certificate '", CutForLog(peer_identity, 256),
                 "' is not a known client on listener '", CutForLog(listener, 64), "'"));
    }
    return it->second.principal;
  }
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return absl::UnauthenticatedError(
        jwt_ != nullptr ? "Authorization header must be 'Bearer <api key or token>'"
                        : "Authorization header must be 'Bearer <api key>'");
  }
  std::string_view credential = authorization.substr(kBearer.size());
  if (jwt_ != nullptr && !credential.starts_with(kApiKeyPrefix) &&
      credential.find('.') != std::string_view::npos) {
    return jwt_->Verify(credential, now_us);
  }
  return keys_->Verify(credential, now_us);
}

absl::StatusOr<std::shared_ptr<const Principal>> Authenticator::Reauthenticate(
    const Principal& stored, int64_t now_us) const {
  switch (stored.method) {
    case AuthMethod::kApiKey:
      return keys_->Current(stored.key_id, now_us);
    case AuthMethod::kMtls: {
      constexpr std::string_view kPrefix = "mtls:";
      const std::string_view name = std::string_view(stored.id).substr(
          stored.id.starts_with(kPrefix) ? kPrefix.size() : stored.id.size());
      auto it = certificate_clients_.find(ToAbsl(name));
      if (it == certificate_clients_.end()) {
        return absl::UnauthenticatedError("client certificate is no longer a known client");
      }
      // Listed is not enough: the certificate may have been revoked, have expired, or its CA
      // left the bundle since (found by review helper-67).
      if (stored.certificate.empty() || !certificate_check_) {
        return absl::UnauthenticatedError(
            "the job was stored without the client certificate that submitted it, which cannot "
            "be checked again: submit it again");
      }
      const std::vector<std::string>& listeners = it->second.listeners;
      if (!listeners.empty() &&
          std::find(listeners.begin(), listeners.end(), stored.listener) == listeners.end()) {
        return absl::UnauthenticatedError(StrCat("client certificate is no longer a client of the ",
                                                 stored.listener, " listener"));
      }
      absl::StatusOr<std::string> named = certificate_check_(stored.listener, stored.certificate);
      if (!named.ok()) return absl::UnauthenticatedError(named.status().message());
      if (*named != name) {
        return absl::UnauthenticatedError("the client certificate names another client now");
      }
      return it->second.principal;
    }
    case AuthMethod::kJwt:
      if (jwt_ == nullptr) {
        return absl::UnauthenticatedError("tokens are no longer accepted by this server");
      }
      if (stored.expires_us != 0 && now_us >= stored.expires_us) {
        return absl::UnauthenticatedError("the token that submitted this job has expired");
      }
      // A key taken out of the JWKS (a leaked one, rotated away) stops its tokens' jobs too.
      if (stored.signing_key.empty() || !jwt_->Trusts(stored)) {
        return absl::UnauthenticatedError(
            "the token that submitted this job would not be accepted now: its issuer or "
            "audience is no longer trusted, or the JWKS no longer gives its key for its kid");
      }
      return std::make_shared<const Principal>(stored);
  }
  return absl::UnauthenticatedError("unknown authentication method");
}

}  // namespace pillar::identity
