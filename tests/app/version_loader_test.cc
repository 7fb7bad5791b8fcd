#include "app/version_loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>

#include "signing/model_manifest.h"
#include "testing/temp_dir.h"
#include "torch_module/torch_module.h"

namespace pillar::app {
namespace {

namespace fs = std::filesystem;

fs::path Demo(const std::string& model) {
  const char* src = std::getenv("PILLAR_SOURCE_DIR");
  return fs::path(src ? src : ".") / "models/demo/store" / model / "1";
}

// Runs one fixed row through a loaded version and returns its output bytes.
std::string Classify(runtime::Runner& runner) {
  protocol::InferenceRequest request;
  protocol::Tensor pixels{"pixels", protocol::DataType::kFp32, {1, 64}, std::string(64 * 4, '\0')};
  for (int i = 0; i < 64; ++i) {
    const float value = float((i * 7) % 17);
    std::memcpy(pixels.data.data() + 4 * i, &value, 4);
  }
  request.inputs.push_back(std::move(pixels));
  std::promise<absl::StatusOr<runtime::InferResult>> result;
  runner.Infer(std::move(request),
               [&](absl::StatusOr<runtime::InferResult> r) { result.set_value(std::move(r)); });
  absl::StatusOr<runtime::InferResult> r = result.get_future().get();
  if (!r.ok() || r->outputs.empty()) return "error: " + std::string(r.status().message());
  return r->outputs[0].data;
}

class VersionLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    version_ = dir_.path() / "store" / "digits" / "1";
    fs::create_directories(version_);
    for (const char* name : {"model.pt", "model.toml", "lineage.json"}) {
      fs::copy_file(Demo("digits") / name, version_ / name);
    }
    key_ = signing::GenerateSigningKey();
    ASSERT_TRUE(signing::SignModel(version_.string(), "digits/1", key_).ok());
    // What someone who can write the store but holds no key would rather have served: another
    // model's weights and a contract that hands the model to another tenant.
    evil_ = dir_.path() / "evil";
    fs::create_directories(evil_);
    fs::copy_file(Demo("digits-lite") / "model.pt", evil_ / "model.pt");
    std::ifstream in(Demo("digits") / "model.toml");
    std::string toml((std::istreambuf_iterator<char>(in)), {});
    toml.replace(toml.find("tenant = \"demo\""), 15, "tenant = \"evil\"");
    std::ofstream(evil_ / "model.toml") << toml;
  }

  // Renames the evil files over the version's, as an attacker racing the loader would.
  void Swap() {
    for (const char* name : {"model.pt", "model.toml"}) {
      fs::copy_file(evil_ / name, version_ / (std::string(name) + ".new"),
                    fs::copy_options::overwrite_existing);
      fs::rename(version_ / (std::string(name) + ".new"), version_ / name);
    }
  }

  void Restore() {
    for (const char* name : {"model.pt", "model.toml"}) {
      fs::copy_file(Demo("digits") / name, version_ / name, fs::copy_options::overwrite_existing);
    }
  }

  models::VersionEntry Entry(const std::string& model = "digits", int64_t version = 1) const {
    return {model, version, version_, 0};
  }

  testing::TempDir dir_;
  fs::path version_, evil_;
  signing::SigningKey key_;
};

// The finding: model.pt swapped between the signature check and the load served another
// model's weights, and model.toml swapped between parse and hash moved the model to another
// tenant. Now a swap after any read of the loader either fails the load or changes nothing.
TEST_F(VersionLoaderTest, FilesSwappedBetweenAnyTwoReadsNeverChangeWhatIsServed) {
  if (!torch_module::LoadTorchModule().ok()) {
    GTEST_SKIP() << "no LibTorch module: " << torch_module::LoadTorchModule().status();
  }
  absl::StatusOr<runtime::LoadedVersion> reference =
      MakeVersionLoader({.require_signatures = true,
                         .trusted = {key_.public_key},
                         .batch_sizes = nullptr,
                         .after_read = {},
                         .verified = {}})(Entry());
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string signed_output = Classify(*reference->runner);
  ASSERT_EQ(signed_output.size(), 40u) << signed_output;
  ASSERT_EQ(reference->config.access.at("tenant"), std::vector<std::string>{"demo"});

  const std::vector<std::string> reads = {"lineage.json", "model.pt", "model.toml"};
  int served = 0, refused = 0;
  for (const std::string& swap_after : reads) {
    SCOPED_TRACE("swapped after reading " + swap_after);
    Restore();
    bool swapped = false;
    absl::StatusOr<runtime::LoadedVersion> loaded =
        MakeVersionLoader({.require_signatures = true,
                           .trusted = {key_.public_key},
                           .batch_sizes = nullptr,
                           .after_read =
                               [&](std::string_view path) {
                                 if (path == swap_after) {
                                   Swap();
                                   swapped = true;
                                 }
                               },
                           .verified = {}})(Entry());
    ASSERT_TRUE(swapped);
    if (!loaded.ok()) {
      ++refused;
      EXPECT_NE(loaded.status().message().find("changed after signing"), std::string::npos)
          << loaded.status();
      continue;
    }
    ++served;
    EXPECT_EQ(loaded->config.access.at("tenant"), std::vector<std::string>{"demo"});
    EXPECT_EQ(Classify(*loaded->runner), signed_output);  // the signed weights, bit for bit
    EXPECT_EQ(loaded->root_digest, reference->root_digest);
  }
  // Swaps before the last read are caught; one after it is harmless. Both paths were taken.
  EXPECT_EQ(refused, 2);
  EXPECT_EQ(served, 1);
  // And the evil files really are different: loaded for what they are, they classify otherwise.
  ASSERT_TRUE(signing::SignModel(version_.string(), "digits/1", key_).ok());  // signs the swap
  absl::StatusOr<runtime::LoadedVersion> evil = MakeVersionLoader({.require_signatures = true,
                                                                   .trusted = {key_.public_key},
                                                                   .batch_sizes = nullptr,
                                                                   .after_read = {},
                                                                   .verified = {}})(Entry());
  ASSERT_TRUE(evil.ok()) << evil.status();
  EXPECT_NE(Classify(*evil->runner), signed_output);
  EXPECT_EQ(evil->config.access.at("tenant"), std::vector<std::string>{"evil"});
}

// Every version that verifies is reported (the server raises the model's version mark with it),
// and one that does not is not.
TEST_F(VersionLoaderTest, VerifiedVersionsAreReportedAndOthersAreNot) {
  std::vector<std::pair<std::string, int64_t>> seen;
  auto loader = MakeVersionLoader(
      {.require_signatures = true,
       .trusted = {key_.public_key},
       .batch_sizes = nullptr,
       .after_read = {},
       .verified = [&](std::string_view m, int64_t v) { seen.emplace_back(std::string(m), v); }});
  (void)loader(Entry());
  (void)loader(Entry("digits", 2));  // the files are digits/1's: not verified for digits/2
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::pair<std::string, int64_t>{"digits", 1}));
}

// The finding: copies of digits/1 were served as digits/2 to digits/6.
TEST_F(VersionLoaderTest, AVersionSignedForAnotherPlaceIsNotLoaded) {
  const fs::path copy = dir_.path() / "store" / "digits" / "2";
  fs::copy(version_, copy, fs::copy_options::recursive);
  models::VersionEntry entry{"digits", 2, copy, 0};
  absl::StatusOr<runtime::LoadedVersion> loaded = MakeVersionLoader({.require_signatures = true,
                                                                     .trusted = {key_.public_key},
                                                                     .batch_sizes = nullptr,
                                                                     .after_read = {},
                                                                     .verified = {}})(entry);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kPermissionDenied) << loaded.status();
  EXPECT_NE(loaded.status().message().find("signed as 'digits/1', but served as 'digits/2'"),
            std::string::npos)
      << loaded.status();
  models::VersionEntry renamed{"digits-lite", 1, version_, 0};
  EXPECT_EQ(MakeVersionLoader({.require_signatures = true,
                               .trusted = {key_.public_key},
                               .batch_sizes = nullptr,
                               .after_read = {},
                               .verified = {}})(renamed)
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
}

// Without signatures there is nothing to check the bytes against, but they are still read once
// and never through a link.
TEST_F(VersionLoaderTest, UnsignedServingStillFollowsNoLinks) {
  fs::remove(version_ / "model.pt");
  fs::create_symlink(evil_ / "model.pt", version_ / "model.pt");
  absl::StatusOr<runtime::LoadedVersion> loaded = MakeVersionLoader({.require_signatures = false,
                                                                     .trusted = {},
                                                                     .batch_sizes = nullptr,
                                                                     .after_read = {},
                                                                     .verified = {}})(Entry());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("symbolic link"), std::string::npos) << loaded.status();
}

}  // namespace
}  // namespace pillar::app
