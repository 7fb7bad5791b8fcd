// Turns a request's credentials into its Principal, whatever the method (R-SEC-12):
//   Authorization: Bearer pk_...        an API key          (ApiKeyTable)
//   Authorization: Bearer <a>.<b>.<c>   a JWT from the IdP  (JwtVerifier, when configured)
//   no Authorization, a verified client certificate on a TLS listener that asks for one:
//                                       the certificate's identity, mapped by configuration
// A credential that is present but bad is refused; it never falls back to another method.
//
//   Authenticator auth(&keys, jwt.get(), clients);
//   absl::StatusOr<std::shared_ptr<const Principal>> who =
//       auth.Authenticate(authorization_header, peer_identity, "data", now_us);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "identity/api_key_table.h"
#include "identity/jwt_verifier.h"
#include "identity/principal.h"

namespace pillar::identity {

// What a client certificate's identity (subject CN, SAN URI or SAN DNS name, per listener)
// maps to.
struct CertificateClient {
  std::string tenant;
  std::vector<std::string> roles;
  Attributes attributes;
  // The listeners (their names: "data", "admin") on which a certificate may name this client;
  // empty: any that asks for client certificates. Listeners that trust different CAs must be
  // named (app/config.cc refuses otherwise): a name is only as good as the CA that vouched for it.
  std::vector<std::string> listeners;
};

class Authenticator {
 public:
  // `keys` is required; `jwt` may be null (JWTs are then refused as malformed keys).
  Authenticator(const ApiKeyTable* keys, const JwtVerifier* jwt,
                const std::map<std::string, CertificateClient>& certificate_clients);

  // `listener`: the name of the listener the request came in on, whose CA verified
  // `peer_identity`.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> Authenticate(
      std::string_view authorization, std::string_view peer_identity, std::string_view listener,
      int64_t now_us) const;

  // The principal `stored` (authenticated earlier, e.g. when an asynchronous job was submitted)
  // as it stands at `now_us`: an API key's current principal while the key is good; a client
  // certificate's while it is still configured and its certificate (Principal::certificate)
  // still verifies on its listener, naming the same client (CertificateCheck); a token's while
  // it has not expired and JwtVerifier::Trusts it (issuer, audience, key). Unauthenticated, naming
  // why, otherwise; a certificate or a token that cannot be checked (stored without what checks
  // it, or no CertificateCheck set) is refused.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> Reauthenticate(
      const Principal& stored, int64_t now_us) const;

  // Verifies a client certificate chain (DER, the client's first) again as the named listener
  // verifies clients now: the name it gives the client, or why not (http::HttpServer::
  // VerifyClientCertificate). Thread-safe.
  using CertificateCheck = std::function<absl::StatusOr<std::string>(std::string_view listener,
                                                                     std::string_view certificate)>;
  // Set before requests are served.
  void SetCertificateCheck(CertificateCheck check) { certificate_check_ = std::move(check); }

 private:
  const ApiKeyTable* keys_;
  const JwtVerifier* jwt_;
  struct Mapped {
    std::shared_ptr<const Principal> principal;
    std::vector<std::string> listeners;  // empty: any
  };
  absl::flat_hash_map<std::string, Mapped> certificate_clients_;
  CertificateCheck certificate_check_;
};

}  // namespace pillar::identity
