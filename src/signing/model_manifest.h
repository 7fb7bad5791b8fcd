// Signing and verifying a model version directory (R-SEC-1, R-SEC-2): every file's SHA-256,
// a root digest over them, an in-toto statement in a DSSE envelope signed with Ed25519.
//
//   PILLAR_RETURN_IF_ERROR(SignModel("store/digits/3", "digits/3", key));
//   absl::StatusOr<VerifiedModel> v = VerifyModel("store/digits/3", trusted_keys);
// A file added, removed or changed after signing, a payload edited, an envelope signed by a key
// not in `trusted` — each is an error that names what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "signing/signing_key.h"

namespace pillar::signing {

struct FileDigest {
  std::string path;    // relative, '/'-separated
  std::string sha256;  // 64 lowercase hex digits
  uint64_t size = 0;
};

// Every regular file under `dir` except the manifest, sorted by path (bytewise). A symbolic
// link or any other kind of file is an error: what is signed must be what is loaded.
absl::StatusOr<std::vector<FileDigest>> DigestDirectory(const std::string& dir);

// SHA-256 over, for each file in order: its path, a NUL byte, its 32-byte digest. Names are in
// it, so renaming a file changes the root.
std::string RootDigest(const std::vector<FileDigest>& files);

// DSSE's pre-authentication encoding of (payload type, payload): what is signed.
std::string PreAuthEncoding(std::string_view payload_type, std::string_view payload);

// Writes `<dir>/model.sig.json` (replacing an older one atomically).
absl::Status SignModel(const std::string& dir, const std::string& name, const SigningKey& key);

struct VerifiedModel {
  std::string name;
  std::string root_digest;
  std::string key_id;  // the trusted key whose signature verified
  std::vector<FileDigest> files;
};

absl::StatusOr<VerifiedModel> VerifyModel(const std::string& dir,
                                          const std::vector<PublicKey>& trusted);

}  // namespace pillar::signing
