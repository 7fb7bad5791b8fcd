// Fuzzes the model store's aliases.json reader: the store is shared with whoever can write it.
// Nothing may crash, and whatever reads back must survive a write and a second read unchanged.
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
  auto aliases = pillar::models::ReadAliases(model_dir);
  if (!aliases.ok()) return 0;
  if (!pillar::models::WriteAliases(model_dir, *aliases).ok()) __builtin_trap();
  auto again = pillar::models::ReadAliases(model_dir);
  if (!again.ok() || again->targets != aliases->targets ||
      again->history.size() != aliases->history.size()) {
    __builtin_trap();
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
