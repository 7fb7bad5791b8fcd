#include "signing/model_manifest.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/crypto.h"
#include "common/files.h"
#include "signing/manifest_format.h"
#include "testing/crash_test.h"
#include "testing/temp_dir.h"

namespace pillar::signing {
namespace {

namespace fs = std::filesystem;

class ModelManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = (dir_.path() / "digits" / "3").string();
    fs::create_directories(fs::path(model_) / "extra");
    std::ofstream(fs::path(model_) / "model.pt") << std::string(100000, 'w');
    std::ofstream(fs::path(model_) / "model.toml") << "platform = \"torchscript\"\n";
    std::ofstream(fs::path(model_) / "extra" / "vocab.txt") << "a\nb\n";
    key_ = GenerateSigningKey();
    ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  }
  absl::Status Verify(const std::vector<PublicKey>& trusted) {
    return VerifyModel(model_, trusted, As("digits/3")).status();
  }
  static VerifyOptions As(std::string name, std::vector<std::string> keep = {}) {
    return {.expected_name = std::move(name), .keep = std::move(keep), .after_read = {}};
  }
  testing::TempDir dir_;
  std::string model_;
  SigningKey key_;
};

// Re-signing (a key rotation) is a replacement of model.sig.json: a crash at any of its steps
// leaves the version signed by the old key or by the new one, never unsigned or torn (which
// would take the version out of service).
TEST_F(ModelManifestTest, ACrashAtAnyStepOfResigningLeavesTheOldSignatureOrTheNew) {
  const SigningKey rotated = GenerateSigningKey();
  auto prepare = [&](const fs::path& dir) {
    fs::create_directories(dir / "digits" / "3");
    std::ofstream(dir / "digits" / "3" / "model.pt") << std::string(5000, 'w');
    ASSERT_TRUE(SignModel((dir / "digits" / "3").string(), "digits/3", key_).ok());
  };
  testing::CrashOutcomes outcomes = testing::ExpectOldOrNewAfterACrashAtEveryStep({
      .prepare = prepare,
      .write =
          [&](Env& env, const fs::path& dir) {
            return SignModel((dir / "digits" / "3").string(), "digits/3", rotated, env);
          },
      .read = [&](const fs::path& dir) -> absl::StatusOr<std::string> {
        absl::StatusOr<VerifiedModel> v = VerifyModel(
            (dir / "digits" / "3").string(), {key_.public_key, rotated.public_key}, As("digits/3"));
        if (!v.ok()) return v.status();
        return v->key_id;
      },
      .old_state = key_.public_key.key_id,
      .new_state = rotated.public_key.key_id,
  });
  EXPECT_GT(outcomes.old_seen, 0);
}

TEST_F(ModelManifestTest, ASignedDirectoryVerifiesAndListsEveryFile) {
  auto v = VerifyModel(model_, {key_.public_key}, As("digits/3"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->name, "digits/3");
  EXPECT_EQ(v->key_id, key_.public_key.key_id);
  ASSERT_EQ(v->files.size(), 3u);
  EXPECT_EQ(v->files[0].path, "extra/vocab.txt");
  EXPECT_EQ(v->files[1].path, "model.pt");
  EXPECT_EQ(v->files[1].size, 100000u);
  EXPECT_EQ(v->files[1].sha256, HexEncode(Sha256(std::string(100000, 'w'))));
  EXPECT_EQ(v->root_digest, RootDigest(v->files));
}

// The envelope checked with another implementation (OpenSSL, not libsodium) and by the DSSE
// rules alone: standard base64, PAE over the in-toto payload type.
TEST_F(ModelManifestTest, TheEnvelopeVerifiesWithAnIndependentEd25519Implementation) {
  const std::string text = *ReadSmallFile(fs::path(model_) / kManifestFile, 1 << 20);
  auto field = [&](const std::string& name) {
    const size_t start = text.find("\"" + name + "\":\"") + name.size() + 4;
    return text.substr(start, text.find('"', start) - start);
  };
  auto decode = [](const std::string& b64) {
    std::string out(b64.size(), '\0');
    const int n =
        EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                        reinterpret_cast<const unsigned char*>(b64.data()), int(b64.size()));
    out.resize(size_t(n) - (b64.ends_with("==") ? 2 : b64.ends_with("=") ? 1 : 0));
    return out;
  };
  const std::string payload = decode(field("payload"));
  const std::string sig = decode(field("sig"));
  ASSERT_EQ(sig.size(), 64u);
  EXPECT_NE(payload.find("\"predicateType\":\"https://pillar.dev/model-manifest/v1\""),
            std::string::npos);
  const std::string pae =
      "DSSEv1 28 application/vnd.in-toto+json " + std::to_string(payload.size()) + " " + payload;
  EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr,
      reinterpret_cast<const unsigned char*>(key_.public_key.bytes.data()), 32);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ASSERT_EQ(EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey), 1);
  EXPECT_EQ(EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(pae.data()), pae.size()),
            1);
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey);
}

TEST_F(ModelManifestTest, EveryChangeAfterSigningIsNamed) {
  {
    std::fstream f(fs::path(model_) / "model.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('x');  // one weight byte
  }
  EXPECT_EQ(Verify({key_.public_key}).message(), model_ + ": model.pt changed after signing");
  ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  std::ofstream(fs::path(model_) / "backdoor.py") << "import os\n";
  EXPECT_EQ(Verify({key_.public_key}).message(), model_ + ": backdoor.py was added after signing");
  fs::remove(fs::path(model_) / "backdoor.py");
  fs::remove(fs::path(model_) / "extra" / "vocab.txt");
  EXPECT_EQ(Verify({key_.public_key}).message(),
            model_ + ": extra/vocab.txt was removed after signing");
}

TEST_F(ModelManifestTest, UntrustedKeysSwappedManifestsAndEditedPayloadsAreRefused) {
  SigningKey other = GenerateSigningKey();
  absl::Status untrusted = Verify({other.public_key});
  EXPECT_EQ(untrusted.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(untrusted.message().find(key_.public_key.key_id), std::string::npos);
  // Signed by another (untrusted) key after a change.
  std::ofstream(fs::path(model_) / "model.toml") << "platform = \"evil\"\n";
  ASSERT_TRUE(SignModel(model_, "digits/3", other).ok());
  EXPECT_EQ(Verify({key_.public_key}).code(), absl::StatusCode::kPermissionDenied);
  // A manifest copied from another model: it verifies as a signature, not as these files.
  ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  const std::string good = *ReadSmallFile(fs::path(model_) / kManifestFile, 1 << 20);
  std::ofstream(fs::path(model_) / "model.toml") << "platform = \"torchscript\"\n";
  EXPECT_EQ(Verify({key_.public_key}).message(), model_ + ": model.toml changed after signing");
  // An edited payload (the signature no longer matches).
  std::string edited = good;
  const size_t at = edited.find("\"payload\":\"") + 20;
  edited[at] = edited[at] == 'A' ? 'B' : 'A';
  std::ofstream(fs::path(model_) / kManifestFile) << edited;
  EXPECT_EQ(Verify({key_.public_key}).code(), absl::StatusCode::kPermissionDenied);
  // Truncated, empty, missing.
  std::ofstream(fs::path(model_) / kManifestFile) << good.substr(0, good.size() / 2);
  EXPECT_EQ(Verify({key_.public_key}).code(), absl::StatusCode::kInvalidArgument);
  fs::remove(fs::path(model_) / kManifestFile);
  EXPECT_EQ(Verify({key_.public_key}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ModelManifestTest, SymbolicLinksAreRefused) {
  fs::create_symlink("/etc/passwd", fs::path(model_) / "link");
  EXPECT_EQ(SignModel(model_, "digits/3", key_).code(), absl::StatusCode::kInvalidArgument);
}

// A link to a file with exactly the signed bytes is refused all the same: what is verified is
// read through the version directory, never through a link its writer controls.
TEST_F(ModelManifestTest, ALinkToTheSignedBytesIsRefusedAtVerification) {
  const fs::path elsewhere = dir_.path() / "weights.pt";
  fs::copy_file(fs::path(model_) / "model.pt", elsewhere);
  fs::remove(fs::path(model_) / "model.pt");
  fs::create_symlink(elsewhere, fs::path(model_) / "model.pt");
  absl::Status s = Verify({key_.public_key});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s;
  // Nor may the version directory itself be a link.
  const fs::path linked = dir_.path() / "digits" / "4";
  fs::create_directory_symlink(model_, linked);
  EXPECT_FALSE(VerifyModel(linked.string(), {key_.public_key}, As("digits/4")).ok());
}

// The finding: a copy of digits/3 put at digits/4 verified (and was served as digits/4).
TEST_F(ModelManifestTest, ASignatureIsBoundToItsModelAndVersion) {
  const fs::path copy = dir_.path() / "digits" / "4";
  fs::copy(model_, copy, fs::copy_options::recursive);
  absl::StatusOr<VerifiedModel> v = VerifyModel(copy.string(), {key_.public_key}, As("digits/4"));
  ASSERT_EQ(v.status().code(), absl::StatusCode::kPermissionDenied) << v.status();
  EXPECT_NE(v.status().message().find("signed as 'digits/3', but served as 'digits/4'"),
            std::string::npos)
      << v.status();
  EXPECT_FALSE(VerifyModel(model_, {key_.public_key}, As("other/3")).ok());
  EXPECT_TRUE(VerifyModel(model_, {key_.public_key}, As("digits/3")).ok());
}

// The finding: files swapped between the hash and the load. Each file is read once and its kept
// bytes are the hashed bytes, so a swap after any read either makes verification fail (a file
// not yet read no longer matches) or changes nothing that is returned.
TEST_F(ModelManifestTest, FilesSwappedBetweenAnyTwoReadsNeverChangeTheVerifiedBytes) {
  const std::vector<std::string> names = {"extra/vocab.txt", "model.pt", "model.toml"};
  std::map<std::string, std::string> signed_bytes;
  for (const std::string& name : names) {
    signed_bytes[name] = *ReadSmallFile(fs::path(model_) / name, 1 << 20);
  }
  for (size_t swap_after = 0; swap_after < names.size(); ++swap_after) {
    SCOPED_TRACE(names[swap_after]);
    // Restore the signed files, then swap every file (renamed over, as an attacker would) once
    // `swap_after` has been read.
    for (const std::string& name : names)
      std::ofstream(fs::path(model_) / name) << signed_bytes[name];
    int reads = 0;
    VerifyOptions options = As("digits/3", names);
    options.after_read = [&](std::string_view path) {
      ++reads;
      if (path != names[swap_after]) return;
      for (const std::string& name : names) {
        const fs::path target = fs::path(model_) / name;
        std::ofstream(target.string() + ".evil") << "evil " << name;
        fs::rename(target.string() + ".evil", target);
      }
    };
    absl::StatusOr<VerifiedModel> v = VerifyModel(model_, {key_.public_key}, options);
    EXPECT_EQ(reads, int(swap_after) + 1 + (v.ok() ? int(names.size() - swap_after - 1) : 0));
    if (swap_after + 1 < names.size()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
      continue;
    }
    ASSERT_TRUE(v.ok()) << v.status();  // swapped after the last read: nothing left to notice
    for (const std::string& name : names) EXPECT_EQ(v->contents.at(name), signed_bytes[name]);
  }
}

// The review's push attack: the staging copy sits in the store, and a file renamed over it
// between the copy and the signature was signed as if it were the source's. Digests are taken
// from the bytes as they are copied, and what is signed is those digests.
TEST_F(ModelManifestTest, ACopySignedFromItsDigestsRefusesAFileSwappedAfterTheCopy) {
  const std::string staging = (dir_.path() / "digits" / ".push-4").string();
  absl::StatusOr<std::vector<FileDigest>> copied = CopyVersion(model_, staging);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(RootDigest(*copied), RootDigest(*DigestDirectory(model_)));
  ASSERT_EQ(copied->size(), 3u);  // the manifest is copied, not listed
  EXPECT_TRUE(fs::exists(fs::path(staging) / kManifestFile));
  // Swapped after the copy, before the signature.
  std::ofstream(fs::path(staging) / "model.pt.evil") << "evil weights";
  fs::rename(fs::path(staging) / "model.pt.evil", fs::path(staging) / "model.pt");
  ASSERT_TRUE(SignDigests(staging, "digits/4", *copied, key_).ok());
  absl::StatusOr<VerifiedModel> v = VerifyModel(staging, {key_.public_key}, As("digits/4"));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
  // Copying never writes through a link planted in the target, nor into an existing directory.
  fs::create_directories(dir_.path() / "elsewhere");
  EXPECT_FALSE(CopyVersion(model_, staging).ok());
  const std::string fresh = (dir_.path() / "digits" / ".push-5").string();
  fs::create_symlink(dir_.path() / "elsewhere", fresh);
  EXPECT_FALSE(CopyVersion(model_, fresh).ok());
  EXPECT_TRUE(fs::is_empty(dir_.path() / "elsewhere"));
}

TEST_F(ModelManifestTest, TheClaimedRootIsReadWithoutHashingTheFiles) {
  absl::StatusOr<std::string> claimed = ClaimedRootDigest(model_);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(*claimed, RootDigest(*DigestDirectory(model_)));
  // A file grown to a terabyte (sparse) is never read for it.
  fs::resize_file(fs::path(model_) / "model.pt", uint64_t(1) << 40);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClaimedRootDigest(model_).ok());
  // Nor by verification, which compares sizes first.
  EXPECT_EQ(VerifyModel(model_, {key_.public_key}, As("digits/3")).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ModelManifestTest, AFileThatIsNotSignedIsNeverKept) {
  std::ofstream(fs::path(model_) / "weights.bin") << "unsigned";
  ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  fs::remove(fs::path(model_) / "weights.bin");
  absl::StatusOr<VerifiedModel> v =
      VerifyModel(model_, {key_.public_key}, As("digits/3", {"model.pt", "absent.bin"}));
  ASSERT_FALSE(v.ok());  // weights.bin was removed after signing
  ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  v = VerifyModel(model_, {key_.public_key}, As("digits/3", {"model.pt", "absent.bin"}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->contents.contains("model.pt"));
  EXPECT_FALSE(v->contents.contains("absent.bin"));
}

// A signing cut short by a crash leaves model.sig.json.tmp beside the manifest; it was refused
// as "added after signing", taking the version out of service until someone removed it.
TEST_F(ModelManifestTest, ATempManifestLeftByACrashedSigningIsPassedOverNeverKept) {
  std::ofstream(fs::path(model_) / "model.sig.json.tmp") << "{\"payload\": \"torn";
  std::ofstream(fs::path(model_) / "model.sig.json.tmp.0f1e2d3c4b5a6978") << "{";
  absl::StatusOr<VerifiedModel> v =
      VerifyModel(model_, {key_.public_key}, As("digits/3", {"model.pt", "model.sig.json.tmp"}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->contents.contains("model.sig.json.tmp"));
  EXPECT_EQ(v->files.size(), 3u);
  // Nor is it copied by a push, nor signed as part of the version.
  const std::string copy = (dir_.path() / "digits" / "4").string();
  auto copied = CopyVersion(model_, copy);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_FALSE(fs::exists(fs::path(copy) / "model.sig.json.tmp"));
  EXPECT_FALSE(fs::exists(fs::path(copy) / "model.sig.json.tmp.0f1e2d3c4b5a6978"));
  ASSERT_TRUE(SignModel(model_, "digits/3", key_).ok());
  v = VerifyModel(model_, {key_.public_key}, As("digits/3"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->files.size(), 3u);
}

TEST(SigningKeyTest, KeyFilesRoundTripAndAReadablePrivateKeyIsRefused) {
  testing::TempDir dir;
  const std::string prefix = (dir.path() / "release").string();
  SigningKey key = GenerateSigningKey();
  ASSERT_TRUE(WriteKeyPair(key, prefix).ok());
  struct stat st {};
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(WriteKeyPair(key, prefix).code(),
            absl::StatusCode::kAlreadyExists);  // never overwritten
  auto again = ReadPrivateKey(prefix + ".key");
  ASSERT_TRUE(again.ok()) << again.status();
  auto pub = ReadPublicKey(prefix + ".pub");
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pub->key_id, key.public_key.key_id);
  EXPECT_TRUE(Verify(*pub, "m", Sign(*again, "m")));
  EXPECT_FALSE(Verify(*pub, "n", Sign(*again, "m")));
  ::chmod((prefix + ".key").c_str(), 0640);
  EXPECT_EQ(ReadPrivateKey(prefix + ".key").status().code(), absl::StatusCode::kPermissionDenied);
  // Whoever may write a trusted public key could put their own there: refused.
  for (mode_t mode : {0664, 0646}) {
    ::chmod((prefix + ".pub").c_str(), mode);
    EXPECT_EQ(ReadPublicKey(prefix + ".pub").status().code(), absl::StatusCode::kPermissionDenied)
        << mode;
  }
  ::chmod((prefix + ".pub").c_str(), 0644);
  EXPECT_TRUE(ReadPublicKey(prefix + ".pub").ok());
  std::ofstream(prefix + ".pub") << "pillar-ed25519-public-v1 0000000000000000 AAAA\n";
  EXPECT_FALSE(ReadPublicKey(prefix + ".pub").ok());
}

}  // namespace
}  // namespace pillar::signing
