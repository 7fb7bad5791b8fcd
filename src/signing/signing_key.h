// Ed25519 signing keys (libsodium) for model manifests and, later, audit checkpoints.
//
//   SigningKey key = GenerateSigningKey();
//   PILLAR_RETURN_IF_ERROR(WriteKeyPair(key, "/etc/pillar/release"));  // .key (0600), .pub
//   absl::StatusOr<SigningKey> again = ReadPrivateKey("/etc/pillar/release.key");
//   std::string sig = Sign(*again, message);
//   bool ok = Verify(*ReadPublicKey("/etc/pillar/release.pub"), message, sig);
// Key files are one line of text (docs/formats/model-manifest.md). A private key file that
// its group or others can read is refused, as ssh refuses one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/crypto.h"

namespace pillar::signing {

struct PublicKey {
  std::string key_id;  // 16 lowercase hex digits of SHA-256(public key bytes)
  std::string bytes;   // 32 bytes
};

// The seed is wiped from memory when the key (and every copy of it) goes away.
struct SigningKey {
  SecretString seed;  // 32 secret bytes
  PublicKey public_key;
};

SigningKey GenerateSigningKey();
// Writes `<prefix>.key` (created 0600, never overwritten) and `<prefix>.pub`.
[[nodiscard]] absl::Status WriteKeyPair(const SigningKey& key, const std::string& prefix);
[[nodiscard]] absl::StatusOr<SigningKey> ReadPrivateKey(const std::string& path);
// PermissionDenied unless the file is owned by pillar's user or root and neither its group nor
// others may write it (a trusted key says whose models load).
[[nodiscard]] absl::StatusOr<PublicKey> ReadPublicKey(const std::string& path);
[[nodiscard]] absl::StatusOr<std::vector<PublicKey>> ReadPublicKeys(
    const std::vector<std::string>& paths);

std::string Sign(const SigningKey& key, std::string_view message);  // 64 bytes
bool Verify(const PublicKey& key, std::string_view message, std::string_view signature);

}  // namespace pillar::signing
