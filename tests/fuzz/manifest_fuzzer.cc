// Fuzzes the signed-manifest reader: a model directory (and its model.sig.json) comes from
// whoever can write to the store. The input becomes the manifest of a small fixed directory,
// verified against a fixed trusted key; nothing may crash, and nothing but the genuine
// envelope may verify.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_temp_dir.h"
#include "signing/manifest_format.h"
#include "signing/model_manifest.h"

namespace {

struct Fixture {
  pillar::fuzz::TempDir temp{"manifest"};
  std::string dir = temp.path.string();
  pillar::signing::SigningKey key = pillar::signing::GenerateSigningKey();
  std::string genuine;
  Fixture() {
    std::ofstream(dir + "/model.pt") << "weights";
    if (!pillar::signing::SignModel(dir, "fuzz/1", key).ok()) __builtin_trap();
    std::ifstream in(dir + "/" + std::string(pillar::signing::kManifestFile));
    genuine.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fixture;
  const std::string manifest(reinterpret_cast<const char*>(data), size);
  std::ofstream(fixture.dir + "/" + std::string(pillar::signing::kManifestFile), std::ios::trunc)
      << manifest;
  auto verified = pillar::signing::VerifyModel(
      fixture.dir, {fixture.key.public_key},
      {.expected_name = "fuzz/1", .keep = {"model.pt"}, .after_read = {}});
  // Only the genuine envelope (or one with the same signed content) may verify, and then the
  // bytes kept are the file's.
  if (verified.ok() &&
      (verified->name != "fuzz/1" || verified->contents.at("model.pt") != "weights")) {
    __builtin_trap();
  }
  return 0;
}
