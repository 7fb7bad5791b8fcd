// Signing and verifying a model version directory (R-SEC-1, R-SEC-2): every file's SHA-256,
// a root digest over them, an in-toto statement naming the version ("<model>/<version>") in a
// DSSE envelope signed with Ed25519.
//
//   PILLAR_RETURN_IF_ERROR(SignModel("store/digits/3", "digits/3", key));
//   absl::StatusOr<VerifiedModel> v = VerifyModel("store/digits/3", trusted_keys,
//                                                 {.expected_name = "digits/3",
//                                                  .keep = {"model.pt", "model.toml"}});
//   ... v->contents.at("model.pt") are the very bytes that were hashed ...
// A file added, removed or changed after signing, a payload edited, an envelope signed by a key
// not in `trusted`, a signature made for another model or version — each is an error that names
// what is wrong. Every file is read once, through one descriptor opened without following links
// (common/directory.h), so what a caller uses is exactly what was hashed, whatever happens to
// the files on disk meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "signing/signing_key.h"

namespace pillar::signing {

struct FileDigest {
  std::string path;    // relative, '/'-separated
  std::string sha256;  // 64 lowercase hex digits
  uint64_t size = 0;
};

// Every regular file under `dir` except the manifest, sorted by path (bytewise). A symbolic
// link or any other kind of file is an error: what is signed must be what is loaded.
[[nodiscard]] absl::StatusOr<std::vector<FileDigest>> DigestDirectory(const std::string& dir);

// SHA-256 over, for each file in order: its path, a NUL byte, its 32-byte digest. Names are in
// it, so renaming a file changes the root.
std::string RootDigest(const std::vector<FileDigest>& files);

// Writes `<dir>/model.sig.json` for subject `name`, replacing an older one through
// PublishAtomically on `env` (durable once it returns).
[[nodiscard]] absl::Status SignModel(const std::string& dir, const std::string& name,
                                     const SigningKey& key, Env& env = *Env::Default());

// SignModel for `files` as the caller digested them (CopyVersion), without reading `dir` again:
// a file changed in `dir` since then no longer matches what is signed.
[[nodiscard]] absl::Status SignDigests(const std::string& dir, const std::string& name,
                                       const std::vector<FileDigest>& files, const SigningKey& key,
                                       Env& env = *Env::Default());

// Copies every regular file beneath `from` (no link followed; the manifest too, if any) into
// `to`, which must not exist yet, hashing each file's bytes as they are copied: the digests
// (the manifest excluded) describe exactly what was written, whatever changes in `from` or
// `to` meanwhile. Files are created 0644, directories 0755, neither through a link.
[[nodiscard]] absl::StatusOr<std::vector<FileDigest>> CopyVersion(const std::string& from,
                                                                  const std::string& to);

// The root digest `dir`'s manifest claims, read without checking the signature or the files: a
// cheap first look (which version might hold the same content), to be confirmed by VerifyModel.
[[nodiscard]] absl::StatusOr<std::string> ClaimedRootDigest(const std::string& dir);

// The subject `dir`'s manifest names, once a key in `trusted` is found to have signed it; the
// files are not read. Whether a directory is a version someone with a key made, at a cost that
// does not grow with its files (what numbering new versions needs).
[[nodiscard]] absl::StatusOr<std::string> SignedSubject(const std::string& dir,
                                                        const std::vector<PublicKey>& trusted);

struct VerifyOptions {
  // The subject the signature must name: "<model>/<version>" of the place the files are served
  // from. Empty accepts any subject (for tools that only show it).
  std::string expected_name;
  // Files whose verified bytes VerifiedModel::contents returns (those that are among the signed
  // files); the others are hashed as they are read and not kept.
  std::vector<std::string> keep;
  // Test seam: called after each file of the version has been read and hashed (and before the
  // next one is opened), with its relative path. Tests swap files on disk here.
  std::function<void(std::string_view path)> after_read;
};

struct VerifiedModel {
  std::string name;
  std::string root_digest;
  std::string key_id;  // the trusted key whose signature verified
  std::vector<FileDigest> files;
  // The bytes of the files VerifyOptions::keep named, exactly as hashed; a kept name that is not
  // a signed file is absent.
  std::map<std::string, std::string, std::less<>> contents;
};

[[nodiscard]] absl::StatusOr<VerifiedModel> VerifyModel(const std::string& dir,
                                                        const std::vector<PublicKey>& trusted,
                                                        const VerifyOptions& options);

// Reads the files `keep` names from `dir` once each, through descriptors opened without
// following links, for a server that does not require signatures: the same read path as
// VerifyModel, with nothing to check the bytes against. A file that does not exist is absent.
[[nodiscard]] absl::StatusOr<std::map<std::string, std::string, std::less<>>> ReadModelFiles(
    const std::string& dir, const std::vector<std::string>& keep);

}  // namespace pillar::signing
