// Who is calling: the one value that authentication produces, whatever the method (API key,
// JWT bearer token, mutual-TLS client certificate), and that policy and limits consume.
//
//   auto who = std::make_shared<Principal>();
//   who->id = "key:3f2a9c01d4e5"; who->tenant = "acme"; who->roles = {"user"};
//   who->attributes["clearances"] = {"public", "internal"};
// Immutable once built and shared by pointer: an API key's principal is built when the key
// table loads and then reused by every request that presents the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/attributes.h"

namespace pillar::identity {

using ::pillar::Attributes;

enum class AuthMethod { kApiKey, kJwt, kMtls };

struct Principal {
  AuthMethod method = AuthMethod::kApiKey;
  // Stable and unique across methods: "key:<id>", "jwt:<subject>" (one issuer is trusted),
  // "mtls:<certificate name>".
  std::string id;
  std::string tenant;  // empty: belongs to no tenant
  std::vector<std::string> roles;
  Attributes attributes;
  // The API key id for keys (the unit that rate limits and last-used times count by).
  std::string key_id;
  // For a key made by rotation: the principal ids of the keys it succeeds ("key:<id>", the one it
  // replaced first, then the one that one replaced...), so that what they owned (their jobs) is
  // still its own. Not kept with a job.
  std::vector<std::string> succeeds;
  // Unix microseconds after which the credential is no longer accepted; 0 when unbounded.
  int64_t expires_us = 0;
  // What checks the credential again when a job runs as this principal (jobs/): a token's
  // signing key as its header named it ("<alg>:<hex SHA-256 of the key's SubjectPublicKeyInfo>:
  // <kid>"), which the JWKS must still give for that kid, and its issuer, which must still be
  // the trusted one; a client certificate's chain (http::Request::peer_certificate) and the
  // listener that verified it, set when a job is submitted, which must still verify there.
  std::string signing_key;
  std::string issuer;
  std::vector<std::string> audiences;  // the token's `aud`: one must still be accepted
  std::string certificate;
  std::string listener;
};

}  // namespace pillar::identity
