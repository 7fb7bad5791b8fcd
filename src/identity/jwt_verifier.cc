#include "identity/jwt_verifier.h"

#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>

#include "common/crypto.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::identity {
namespace {

constexpr uintmax_t kMaxJwksBytes = 1 << 20;

[[nodiscard]] absl::Status Refuse(std::string_view why) {
  return absl::UnauthenticatedError(StrCat("invalid token: ", why));
}

// ES256 signatures in a JWS are r||s (32 bytes each); OpenSSL verifies DER.
std::string EcdsaRawToDer(std::string_view raw) {
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()) + 32, 32, nullptr);
  std::string der;
  if (sig != nullptr && r != nullptr && s != nullptr && ECDSA_SIG_set0(sig, r, s) == 1) {
    r = s = nullptr;  // owned by sig now
    unsigned char* out = nullptr;
    int len = i2d_ECDSA_SIG(sig, &out);
    if (len > 0) der.assign(reinterpret_cast<char*>(out), size_t(len));
    OPENSSL_free(out);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(sig);
  return der;
}

// A header value as key sets and JOSE write them (a kid: a thumbprint, a name, a date; an alg:
// "RS256"), quoted in a refusal. The token is not verified yet, so its header is anyone's text:
// anything else is not quoted, and no part of it either (reviews helper-136 and 137: a kid and an
// alg cut at 64 and 16 bytes reached the audit log, cut inside what a recognizer would have found
// whole; a card's digits joined by '+' or '/', which no recognizer reads as one).
bool Quotable(std::string_view text, size_t max, std::string_view also) {
  return !text.empty() && text.size() <= max && std::all_of(text.begin(), text.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           also.find(c) != std::string_view::npos;
  });
}
bool QuotableKid(std::string_view kid) { return Quotable(kid, 64, "-_.:"); }

bool VerifySignature(const JwksKey& key, std::string_view signed_part, std::string_view sig) {
  std::string der;
  if (key.algorithm == JwtAlgorithm::kEs256) {
    if (sig.size() != 64) return false;
    der = EcdsaRawToDer(sig);
    if (der.empty()) return false;
    sig = der;
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return false;
  const EVP_MD* md = key.algorithm == JwtAlgorithm::kEdDsa ? nullptr : EVP_sha256();
  const bool ok =
      EVP_DigestVerifyInit(ctx, nullptr, md, nullptr, key.key.get()) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(signed_part.data()),
                       signed_part.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

// A NumericDate: seconds since the epoch, integer or not.
bool ReadTime(simdjson::dom::object& claims, std::string_view name, double& out, bool& present) {
  simdjson::dom::element value;
  present = claims[name].get(value) == simdjson::SUCCESS;
  if (!present) return true;
  if (value.get_double().get(out) != simdjson::SUCCESS) {
    int64_t i;
    if (value.get_int64().get(i) != simdjson::SUCCESS) return false;
    out = double(i);
  }
  return std::isfinite(out);
}

// A claim that is a string or an array of strings; `split_spaces` also splits a string (OAuth
// scopes are written that way).
bool ReadStrings(simdjson::dom::object& claims, std::string_view name, bool split_spaces,
                 std::vector<std::string>& out) {
  simdjson::dom::element value;
  if (claims[name].get(value) != simdjson::SUCCESS) return true;
  std::string_view text;
  if (value.get_string().get(text) == simdjson::SUCCESS) {
    if (!split_spaces) {
      out.emplace_back(text);
      return true;
    }
    for (std::string_view part : Split(text, ' ')) {
      if (!part.empty()) out.emplace_back(part);
    }
    return true;
  }
  simdjson::dom::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element item : array) {
    if (item.get_string().get(text) != simdjson::SUCCESS) return false;
    out.emplace_back(text);
  }
  return true;
}

// A compact JWS's three parts, decoded, and the part its signature covers.
struct JwsParts {
  std::string header_json;
  std::string claims_json;
  std::string signature;
  std::string_view signed_part;  // "header.claims" as sent: a view of the token
};

[[nodiscard]] absl::StatusOr<JwsParts> SplitCompactJws(std::string_view token) {
  const size_t dot1 = token.find('.');
  const size_t dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos) {
    return Refuse("not a compact JWS (three dot-separated parts)");
  }
  absl::StatusOr<std::string> header_json = Base64UrlDecode(token.substr(0, dot1));
  absl::StatusOr<std::string> claims_json =
      Base64UrlDecode(token.substr(dot1 + 1, dot2 - dot1 - 1));
  absl::StatusOr<std::string> signature = Base64UrlDecode(token.substr(dot2 + 1));
  if (!header_json.ok() || !claims_json.ok() || !signature.ok()) return Refuse("bad base64url");
  return JwsParts{std::move(*header_json), std::move(*claims_json), std::move(*signature),
                  token.substr(0, dot2)};
}

struct JwsHeader {
  JwtAlgorithm alg;
  std::string kid;  // empty when the header has none
};

// The header's algorithm (one of those accepted) and key id.
[[nodiscard]] absl::StatusOr<JwsHeader> ParseJwsHeader(simdjson::dom::parser& parser,
                                                       const std::string& json) {
  simdjson::dom::element header_root;
  simdjson::dom::object header;
  if (parser.parse(json).get(header_root) != simdjson::SUCCESS ||
      header_root.get_object().get(header) != simdjson::SUCCESS) {
    return Refuse("header is not a JSON object");
  }
  std::string_view alg_name, kid_view;
  if (header["alg"].get_string().get(alg_name) != simdjson::SUCCESS) return Refuse("no alg");
  JwsHeader out;
  const std::optional<JwtAlgorithm> alg = JwtAlgorithmNamed(alg_name);
  if (!alg) {
    // "none", HS256 (the classic confusion with an RSA public key as secret) and the rest.
    return Refuse(Quotable(alg_name, 16, "")
                      ? StrCat("algorithm '", alg_name, "' is not accepted")
                      : std::string("the token's algorithm is not accepted"));
  }
  out.alg = *alg;
  if (header["crit"].error() == simdjson::SUCCESS) return Refuse("unsupported 'crit' header");
  if (header["kid"].get_string().get(kid_view) != simdjson::SUCCESS) kid_view = {};
  out.kid = std::string(kid_view);  // the parser's buffer is reused for the claims
  return out;
}

// Checks exp (required) and nbf against now, give or take `clock_skew`. Answers exp, in
// seconds, and sets *not_before_us when there is an nbf.
[[nodiscard]] absl::StatusOr<double> CheckValidityPeriod(simdjson::dom::object& claims,
                                                         int64_t now_us, absl::Duration clock_skew,
                                                         int64_t* not_before_us) {
  const double now = double(now_us) / 1e6;
  const double skew = absl::ToDoubleSeconds(clock_skew);
  double exp = 0, nbf = 0;
  bool has_exp = false, has_nbf = false;
  if (!ReadTime(claims, "exp", exp, has_exp) || !ReadTime(claims, "nbf", nbf, has_nbf)) {
    return Refuse("exp and nbf must be numbers");
  }
  if (!has_exp) return Refuse("no exp claim");
  // Times past year 9999 are refused, so converting them to microseconds cannot overflow.
  constexpr double kLatestTime = 253402300799.0;
  if (exp > kLatestTime || nbf > kLatestTime || exp < -kLatestTime || nbf < -kLatestTime) {
    return Refuse("exp or nbf out of range");
  }
  if (now >= exp + skew) return Refuse("expired");
  if (has_nbf && now + skew < nbf) return Refuse("not yet valid");
  if (has_nbf) *not_before_us = int64_t(nbf * 1e6);
  return exp;
}

// Whether one of a token's audiences is one `options` accepts.
bool AcceptsAudience(const std::vector<std::string>& audiences, const JwtOptions& options) {
  return std::any_of(audiences.begin(), audiences.end(), [&](const std::string& a) {
    return std::find(options.audiences.begin(), options.audiences.end(), a) !=
           options.audiences.end();
  });
}

[[nodiscard]] absl::Status CheckIssuerAndAudience(simdjson::dom::object& claims,
                                                  const JwtOptions& options) {
  std::string_view iss;
  if (claims["iss"].get_string().get(iss) != simdjson::SUCCESS || iss != options.issuer) {
    return Refuse("wrong issuer");
  }
  std::vector<std::string> audiences;
  if (!ReadStrings(claims, "aud", false, audiences)) return Refuse("aud must be strings");
  if (!AcceptsAudience(audiences, options)) return Refuse("wrong audience");
  return absl::OkStatus();
}

// The principal the claims name, with the tenant, roles and attributes `options` maps from
// them; it expires at `exp` (seconds).
[[nodiscard]] absl::StatusOr<std::shared_ptr<const Principal>> PrincipalFromClaims(
    simdjson::dom::object& claims, const JwtOptions& options, double exp,
    std::string_view signing_key) {
  auto principal = std::make_shared<Principal>();
  principal->method = AuthMethod::kJwt;
  principal->signing_key = std::string(signing_key);
  principal->issuer = options.issuer;
  if (!ReadStrings(claims, "aud", false, principal->audiences))
    return Refuse("aud must be strings");
  std::string_view subject;
  if (claims[options.subject_claim].get_string().get(subject) != simdjson::SUCCESS ||
      subject.empty()) {
    return Refuse(StrCat("no '", options.subject_claim, "' claim"));
  }
  principal->id = StrCat("jwt:", subject);
  principal->expires_us = int64_t(exp * 1e6);
  if (!options.tenant_claim.empty()) {
    std::string_view tenant;
    if (claims[options.tenant_claim].get_string().get(tenant) == simdjson::SUCCESS) {
      principal->tenant = std::string(tenant);
    }
  }
  if (!ReadStrings(claims, options.roles_claim, true, principal->roles)) {
    return Refuse(StrCat("'", options.roles_claim, "' must be strings"));
  }
  for (const auto& [attribute, claim] : options.attribute_claims) {
    std::vector<std::string> values;
    if (!ReadStrings(claims, claim, false, values)) {
      return Refuse(StrCat("'", claim, "' must be strings"));
    }
    if (!values.empty()) principal->attributes[attribute] = std::move(values);
  }
  return std::shared_ptr<const Principal>(std::move(principal));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JwtVerifier>> JwtVerifier::Create(JwtOptions options) {
  if (options.issuer.empty() || options.audiences.empty()) {
    return absl::InvalidArgumentError("JWT verification needs an issuer and an audience");
  }
  auto verifier = std::make_unique<JwtVerifier>(options, nullptr);
  JwtVerifier* raw = verifier.get();
  verifier->watcher_ = std::make_unique<FileWatcher>(
      options.jwks_path, "JWKS", options.reload_interval, kMaxJwksBytes,
      [raw, path = options.jwks_path](const std::string& text) -> absl::Status {
        absl::StatusOr<std::shared_ptr<const Jwks>> jwks = Jwks::Parse(text);
        if (!jwks.ok()) {
          return absl::InvalidArgumentError(StrCat(path, ": ", jwks.status().message()));
        }
        absl::MutexLock lock(&raw->mu_);
        raw->jwks_ = std::move(*jwks);
        return absl::OkStatus();
      },
      // The key set says whose signatures make a principal: whoever could write it could add a
      // key of their own and mint tokens for anyone. So it is trusted as the policy is.
      ReadTrustedFile);
  if (absl::Status s = verifier->watcher_->LoadNow(); !s.ok()) return s;
  if (options.reload_interval > absl::ZeroDuration()) verifier->watcher_->Start();
  return verifier;
}

JwtVerifier::JwtVerifier(JwtOptions options, std::shared_ptr<const Jwks> jwks)
    : options_(std::move(options)), jwks_(std::move(jwks)) {}

absl::StatusOr<std::shared_ptr<const Principal>> JwtVerifier::Verify(std::string_view token,
                                                                     int64_t now_us) const {
  if (token.size() > options_.max_token_bytes) return Refuse("too large");
  std::shared_ptr<const Jwks> jwks = CurrentKeys();
  if (options_.cache_entries > 0) {
    absl::ReaderMutexLock lock(&cache_mu_);
    auto it = cache_.find(ToAbsl(token));
    if (it != cache_.end() && it->second.jwks == jwks) {
      const Cached& c = it->second;
      if (now_us >= c.expires_us) return Refuse("expired");
      if (now_us < c.not_before_us) return Refuse("not yet valid");
      return c.principal;
    }
  }
  int64_t not_before_us = 0;
  absl::StatusOr<std::shared_ptr<const Principal>> who =
      VerifyUncached(token, now_us, jwks, &not_before_us);
  if (who.ok() && options_.cache_entries > 0) {
    const int64_t skew_us = absl::ToInt64Microseconds(options_.clock_skew);
    absl::MutexLock lock(&cache_mu_);
    // Bounded by dropping everything when full: simple, and the next requests refill it with
    // the tokens actually in use.
    if (cache_.size() >= options_.cache_entries ||
        cache_bytes_ + token.size() > options_.cache_bytes) {
      cache_.clear();
      cache_bytes_ = 0;
    }
    cache_bytes_ += token.size();
    cache_[std::string(token)] = Cached{
        *who, jwks, not_before_us == 0 ? 0 : not_before_us - skew_us, (*who)->expires_us + skew_us};
  }
  return who;
}

absl::StatusOr<std::shared_ptr<const Principal>> JwtVerifier::VerifyUncached(
    std::string_view token, int64_t now_us, const std::shared_ptr<const Jwks>& jwks,
    int64_t* not_before_us) const {
  PILLAR_ASSIGN_OR_RETURN(const JwsParts parts, SplitCompactJws(token));
  thread_local simdjson::dom::parser parser;
  PILLAR_ASSIGN_OR_RETURN(const JwsHeader header, ParseJwsHeader(parser, parts.header_json));
  const JwksKey* key = jwks ? jwks->Find(header.kid, header.alg) : nullptr;
  if (key == nullptr) {
    const std::string kid = header.kid.empty()        ? std::string()
                            : QuotableKid(header.kid) ? StrCat(" '", header.kid, "'")
                                                      : std::string(" for the token's kid");
    return Refuse(StrCat("no ", JwtAlgorithmName(header.alg), " key", kid, " in the JWKS"));
  }
  if (!VerifySignature(*key, parts.signed_part, parts.signature)) {
    return Refuse("signature does not verify");
  }

  // Only now, with the signature checked, are the claims worth reading.
  simdjson::dom::element claims_root;
  simdjson::dom::object claims;
  if (parser.parse(parts.claims_json).get(claims_root) != simdjson::SUCCESS ||
      claims_root.get_object().get(claims) != simdjson::SUCCESS) {
    return Refuse("claims are not a JSON object");
  }
  PILLAR_ASSIGN_OR_RETURN(const double exp,
                          CheckValidityPeriod(claims, now_us, options_.clock_skew, not_before_us));
  PILLAR_RETURN_IF_ERROR(CheckIssuerAndAudience(claims, options_));
  // What a job's run checks again (Trusts): the key as this token named it, and the issuer.
  return PrincipalFromClaims(
      claims, options_, exp,
      StrCat(JwtAlgorithmName(header.alg), ":", key->fingerprint, ":", header.kid));
}

bool JwtVerifier::Trusts(const Principal& stored) const {
  if (stored.issuer != options_.issuer) return false;
  // One of the token's audiences still accepted (found by review helper-70: a restart with other
  // `audiences` refused the token but ran its jobs).
  if (!AcceptsAudience(stored.audiences, options_)) return false;
  // "<alg>:<fingerprint>:<kid>": the key the token's header named, looked up as a request's
  // token would be now (the same kid, the same algorithm), which must be the same key.
  const std::string_view key = stored.signing_key;
  const size_t alg_end = key.find(':');
  if (alg_end == std::string_view::npos) return false;
  const std::string_view alg = key.substr(0, alg_end);
  const std::string_view rest = key.substr(alg_end + 1);
  const size_t fingerprint_end = rest.find(':');
  if (fingerprint_end == std::string_view::npos) return false;
  const std::string_view fingerprint = rest.substr(0, fingerprint_end);
  const std::string_view kid = rest.substr(fingerprint_end + 1);
  const std::optional<JwtAlgorithm> algorithm = JwtAlgorithmNamed(alg);
  const std::shared_ptr<const Jwks> jwks = CurrentKeys();
  if (!algorithm || jwks == nullptr) return false;
  const JwksKey* found = jwks->Find(kid, *algorithm);
  return found != nullptr && found->fingerprint == fingerprint;
}

}  // namespace pillar::identity
