// Verifies JWT bearer tokens (RFC 7519, compact JWS) from an OIDC identity provider: RS256,
// ES256 or EdDSA signatures against a JWKS file that is reloaded when it changes; `iss`,
// `aud`, `exp` and `nbf` checked with a clock skew; claims mapped to the principal's tenant,
// roles and attributes by configuration (docs/security.md).
//
//   JwtOptions options;  options.jwks_path = "jwks.json"; options.issuer = "https://idp";
//   options.audiences = {"pillar"};
//   auto verifier = JwtVerifier::Create(options);   // loads the JWKS or fails
//   absl::StatusOr<std::shared_ptr<const Principal>> who = (*verifier)->Verify(token, now_us);
// Verify() is thread-safe. Every refusal is Unauthenticated and says why.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_watcher.h"
#include "identity/jwks.h"
#include "identity/principal.h"

namespace pillar::identity {

struct JwtOptions {
  std::string jwks_path;
  std::string issuer;                  // `iss` must equal it
  std::vector<std::string> audiences;  // `aud` must name one of them
  absl::Duration clock_skew = absl::Seconds(60);
  absl::Duration reload_interval = absl::Seconds(1);
  size_t max_token_bytes = 8192;
  // Tokens already verified are remembered (until they expire, or the key set changes), so a
  // client that sends the same token with every request pays for one signature check, not
  // one per request. 0 disables the cache.
  size_t cache_entries = 10'000;
  size_t cache_bytes = 16 << 20;  // and at most this many token bytes
  std::string subject_claim = "sub";
  std::string tenant_claim;           // empty: principals get no tenant
  std::string roles_claim = "roles";  // an array of strings or a space-separated string
  std::map<std::string, std::string> attribute_claims;  // attribute name -> claim name
};

class JwtVerifier {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<JwtVerifier>> Create(JwtOptions options);
  // A verifier over a fixed key set (tests, fuzzers): no file, no reload.
  JwtVerifier(JwtOptions options, std::shared_ptr<const Jwks> jwks);

  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> Verify(std::string_view token,
                                                                        int64_t now_us) const;
  // Whether a token this verifier accepted for `stored` (a job's principal) would still be
  // accepted now as far as its issuer, audience and key go: the same issuer is trusted, one of
  // its audiences is accepted, and the kid its header named (Principal::signing_key) finds the
  // same key in the JWKS (found by review helpers 69 and 70: the same key republished under
  // another kid, or other audiences, refused the token, not its job).
  bool Trusts(const Principal& stored) const;

 private:
  std::shared_ptr<const Jwks> CurrentKeys() const {
    absl::ReaderMutexLock lock(&mu_);
    return jwks_;
  }
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> VerifyUncached(
      std::string_view token, int64_t now_us, const std::shared_ptr<const Jwks>& jwks,
      int64_t* not_before_us) const;

  struct Cached {
    std::shared_ptr<const Principal> principal;
    std::shared_ptr<const Jwks> jwks;  // the set that verified it; another set: re-verify
    int64_t not_before_us;             // nbf minus the skew (0: none)
    int64_t expires_us;                // exp plus the skew
  };

  const JwtOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Jwks> jwks_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<FileWatcher> watcher_;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, Cached> cache_ ABSL_GUARDED_BY(cache_mu_);
  mutable size_t cache_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;  // token bytes held
};

}  // namespace pillar::identity
