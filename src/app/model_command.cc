// `pillar keygen`, `pillar model sign` and `pillar model verify`: Ed25519 keys and signed model
// manifests (docs/formats/model-manifest.md).
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "common/files.h"
#include "common/strings.h"
#include "signing/manifest_format.h"
#include "signing/model_manifest.h"
#include "signing/signing_key.h"

namespace pillar::app {
namespace {

int Fail(std::string_view command, const absl::Status& status) {
  std::fprintf(stderr, "pillar %s: %s\n", std::string(command).c_str(),
               std::string(status.message()).c_str());
  return 1;
}

// The subject name a version directory gets by default: "<model>/<version>".
std::string DefaultName(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return StrCat(p.parent_path().filename().string(), "/", p.filename().string());
}

}  // namespace

int RunKeygen(const SigningOptions& options) {
  signing::SigningKey key = signing::GenerateSigningKey();
  if (absl::Status s = signing::WriteKeyPair(key, options.out); !s.ok()) return Fail("keygen", s);
  std::printf("%s\n", key.public_key.key_id.c_str());
  std::fprintf(stderr,
               "pillar keygen: wrote %s.key (0600, keep it secret) and %s.pub (key id %s)\n",
               options.out.c_str(), options.out.c_str(), key.public_key.key_id.c_str());
  return 0;
}

int RunModelSign(const SigningOptions& options) {
  absl::StatusOr<signing::SigningKey> key = signing::ReadPrivateKey(options.key);
  if (!key.ok()) return Fail("model sign", key.status());
  const std::string name = options.name.empty() ? DefaultName(options.dir) : options.name;
  if (absl::Status s = signing::SignModel(options.dir, name, *key); !s.ok()) {
    return Fail("model sign", s);
  }
  std::fprintf(stderr, "pillar model sign: signed %s as %s with key %s\n", options.dir.c_str(),
               name.c_str(), key->public_key.key_id.c_str());
  return 0;
}

int RunModelVerify(const SigningOptions& options) {
  absl::StatusOr<std::vector<signing::PublicKey>> keys =
      signing::ReadPublicKeys(options.trusted_keys);
  if (!keys.ok()) return Fail("model verify", keys.status());
  const std::vector<signing::PublicKey>& trusted = *keys;
  if (trusted.empty()) {
    return Fail("model verify", absl::InvalidArgumentError("give at least one --trusted-key"));
  }
  // A signature speaks for one model version: by default the one the directory's path names.
  const std::string expected =
      options.expected.empty() ? DefaultName(options.dir) : options.expected;
  absl::StatusOr<signing::VerifiedModel> model = signing::VerifyModel(
      options.dir, trusted, {.expected_name = expected, .keep = {}, .after_read = {}});
  if (!model.ok()) return Fail("model verify", model.status());
  std::printf("%s: verified %s (%zu files, root sha256 %s) signed by key %s\n", options.dir.c_str(),
              model->name.c_str(), model->files.size(), model->root_digest.c_str(),
              model->key_id.c_str());
  return 0;
}

int RunModelShow(const SigningOptions& options) {
  absl::StatusOr<std::vector<signing::PublicKey>> keys =
      signing::ReadPublicKeys(options.trusted_keys);
  if (!keys.ok()) return Fail("model show", keys.status());
  const std::vector<signing::PublicKey>& trusted = *keys;
  absl::StatusOr<std::vector<signing::FileDigest>> files = signing::DigestDirectory(options.dir);
  if (!files.ok()) return Fail("model show", files.status());
  std::printf("version    %s\n", options.dir.c_str());
  std::printf("root       sha256:%s\n", signing::RootDigest(*files).c_str());
  if (trusted.empty()) {
    const bool present =
        std::filesystem::exists(std::filesystem::path(options.dir) / signing::kManifestFile);
    std::printf("signature  %s\n", present ? "present, not checked (give --trusted-key)" : "none");
  } else {
    // Shows whatever subject it names; `verify` is the check that it names this place.
    absl::StatusOr<signing::VerifiedModel> verified =
        signing::VerifyModel(options.dir, trusted, {});
    if (verified.ok()) {
      std::printf("signature  verified: %s signed by key %s\n", verified->name.c_str(),
                  verified->key_id.c_str());
    } else {
      std::printf("signature  NOT VERIFIED: %s\n",
                  std::string(verified.status().message()).c_str());
    }
  }
  std::printf("files\n");
  for (const signing::FileDigest& f : *files) {
    std::printf("  %-40s %12llu  sha256:%s\n", f.path.c_str(),
                static_cast<unsigned long long>(f.size), f.sha256.c_str());
  }
  // Lineage is a file of the version, so it is covered by the signature like the weights.
  absl::StatusOr<std::string> lineage =
      ReadSmallFile(std::filesystem::path(options.dir) / "lineage.json", 1 << 20);
  if (lineage.ok()) {
    std::printf("lineage (lineage.json)\n%s", lineage->c_str());
    if (!lineage->empty() && lineage->back() != '\n') std::printf("\n");
  } else {
    std::printf("lineage    none (no lineage.json)\n");
  }
  return 0;
}

}  // namespace pillar::app
