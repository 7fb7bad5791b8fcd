// Fuzzes the model store's aliases.json reader: the store is shared with whoever can write it.
// Nothing may crash; whatever reads back must survive a write and a second read unchanged, both
// unsigned and signed; and nothing the input holds passes where a signature is required unless
// it is a genuine envelope (which a fuzzer cannot make).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_temp_dir.h"
#include "models/model_aliases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pillar::fuzz::TempDir dir("aliases");
  const std::filesystem::path& model_dir = dir.path;
  {
    std::ofstream out(model_dir / pillar::models::kAliasesFile, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  static const pillar::signing::SigningKey key = pillar::signing::GenerateSigningKey();
  const std::string model = model_dir.filename().string();
  const pillar::models::AliasTrust unsigned_ok{
      .trusted = {key.public_key}, .require_signature = false, .admit_generation = {}};
  const pillar::models::AliasTrust signed_only{
      .trusted = {key.public_key}, .require_signature = true, .admit_generation = {}};
  if (pillar::models::ReadAliases(model_dir, model, signed_only).ok()) __builtin_trap();
  auto aliases = pillar::models::ReadAliases(model_dir, model, unsigned_ok);
  if (!aliases.ok()) return 0;
  if (!pillar::models::WriteAliases(model_dir, model, *aliases, nullptr).ok()) __builtin_trap();
  auto again = pillar::models::ReadAliases(model_dir, model, unsigned_ok);
  if (!again.ok() || again->targets != aliases->targets ||
      again->history.size() != aliases->history.size() ||
      again->generation != aliases->generation) {
    __builtin_trap();
  }
  if (aliases->generation > 0) {
    if (!pillar::models::WriteAliases(model_dir, model, *aliases, &key).ok()) __builtin_trap();
    auto verified = pillar::models::ReadAliases(model_dir, model, signed_only);
    if (!verified.ok() || verified->targets != aliases->targets ||
        verified->signed_by != key.public_key.key_id) {
      __builtin_trap();
    }
  }
  for (size_t i = 0; i < again->history.size(); ++i) {
    const auto& a = aliases->history[i];
    const auto& b = again->history[i];
    if (a.alias != b.alias || a.action != b.action || a.from != b.from || a.to != b.to ||
        a.by != b.by || a.time_us != b.time_us) {
      __builtin_trap();
    }
  }
  return 0;
}
