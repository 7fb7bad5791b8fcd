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

struct SigningOptions {
  std::string out;   // keygen: the path prefix of the key pair
  std::string dir;   // the model version directory
  std::string key;   // sign: the private key file
  std::string name;  // sign: the subject name; default "<model>/<version>" from the path
  std::vector<std::string> trusted_keys;  // verify: public key files
  std::string expected;  // verify: the subject it must name; default "<model>/<version>"
};

// The subject name a version directory gets by default: "<model>/<version>".
std::string DefaultName(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return StrCat(p.parent_path().filename().string(), "/", p.filename().string());
}

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
    std::error_code ec;  // not the throwing overload: an unreadable directory is "none"
    const bool present =
        std::filesystem::exists(std::filesystem::path(options.dir) / signing::kManifestFile, ec);
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

}  // namespace

void AddModelCommands(CLI::App& cli, Commands& commands) {
  auto signing = std::make_shared<SigningOptions>();
  CLI::App* keygen = cli.add_subcommand("keygen", "Make an Ed25519 signing key pair");
  keygen->add_option("--out", signing->out, "Path prefix: writes PREFIX.key (0600) and PREFIX.pub")
      ->required();
  commands.On(keygen, [signing] { return RunKeygen(*signing); });
  CLI::App* group =
      cli.add_subcommand("model", "Sign, verify, push, promote and roll back model versions");
  group->require_subcommand(1);
  CLI::App* sign = group->add_subcommand("sign", "Sign a model version directory");
  sign->add_option("dir", signing->dir, "The version directory, e.g. store/digits/3")->required();
  sign->add_option("--key", signing->key, "The private key file (from pillar keygen)")->required();
  sign->add_option("--name", signing->name, "Subject name (default: <model>/<version>)");
  commands.On(sign, [signing] { return RunModelSign(*signing); });
  CLI::App* verify = group->add_subcommand("verify", "Verify a model version directory");
  verify->add_option("dir", signing->dir, "The version directory")->required();
  verify
      ->add_option("--trusted-key", signing->trusted_keys, "A trusted public key file (repeatable)")
      ->required();
  verify->add_option("--name", signing->expected,
                     "The model/version the signature must name (default: from the path)");
  commands.On(verify, [signing] { return RunModelVerify(*signing); });
  CLI::App* show =
      group->add_subcommand("show", "Show a version: files, digests, signature and lineage");
  show->add_option("dir", signing->dir, "The version directory")->required();
  show->add_option("--trusted-key", signing->trusted_keys,
                   "Check the signature against these keys");
  commands.On(show, [signing] { return RunModelShow(*signing); });
  AddModelStoreCommands(*group, commands);
}

}  // namespace pillar::app
