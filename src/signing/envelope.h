// DSSE envelopes (https://github.com/secure-systems-lab/dsse) signed with Ed25519: a payload of
// a declared type and signatures over DSSE's pre-authentication encoding of both. Signed model
// manifests and signed alias files are such envelopes.
//
//   std::string text = SealEnvelope("application/vnd.pillar.aliases+json", payload, key);
//   PILLAR_ASSIGN_OR_RETURN(OpenedEnvelope e, OpenEnvelope(text, type, trusted, "aliases.json"));
//   ... e.payload is authenticated; e.key_id names the trusted key that signed it ...
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "signing/signing_key.h"

namespace pillar::signing {

// DSSE's pre-authentication encoding of (payload type, payload): what is signed.
std::string PreAuthEncoding(std::string_view payload_type, std::string_view payload);

// The envelope's JSON text (one line, no trailing newline), signed with `key`.
std::string SealEnvelope(std::string_view payload_type, std::string_view payload,
                         const SigningKey& key);

struct OpenedEnvelope {
  std::string payload;
  std::string key_id;  // the trusted key whose signature verified
};

// Parses `text` as an envelope of `payload_type` and checks that a key in `trusted` signed it.
// InvalidArgument for a malformed envelope or another type, PermissionDenied when no trusted
// signature verifies. `source` names the file in messages.
[[nodiscard]] absl::StatusOr<OpenedEnvelope> OpenEnvelope(std::string_view text,
                                                          std::string_view payload_type,
                                                          const std::vector<PublicKey>& trusted,
                                                          std::string_view source);

// Whether `text` looks like an envelope at all (a JSON object with "payloadType"), so readers of
// files that were once unsigned can tell the two apart.
bool LooksLikeEnvelope(std::string_view text);

}  // namespace pillar::signing
