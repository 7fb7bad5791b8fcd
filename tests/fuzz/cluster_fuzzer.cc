// Fuzzes what cluster validation reads from outside: a health config (an operator's file), the
// output of a collective command and a kernel log (another program's text), and the
// benchmark's command line. Nothing may crash; a config that parses must be internally sane.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/collective_options.h"
#include "health/health_checks.h"
#include "health/health_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = pillar::health::ParseHealthConfig(text, "fuzz.toml");
  if (config.ok()) {
    for (const auto& disk : config->disks) {
      if (disk.path.empty() || disk.write_mib < 1) __builtin_trap();
    }
    if (config->collective && config->collective->command.empty()) __builtin_trap();
    if (config->gpu && config->gpu->min_clock_ratio &&
        !(*config->gpu->min_clock_ratio >= 0 && *config->gpu->min_clock_ratio <= 1)) {
      __builtin_trap();
    }
  }
  auto summary = pillar::health::ParseNcclTestsSummary(text);
  (void)summary;
  (void)pillar::health::ParseXids(text);
  // The same bytes as a command line, split at spaces.
  std::vector<std::string> args;
  size_t at = 0;
  while (at <= text.size() && args.size() < 64) {
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    args.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  auto options = pillar::bench::ParseCollectiveArgs(args, nullptr);
  if (options.ok() && (options->min_bytes > options->max_bytes || options->iters < 1 ||
                       options->types.empty() || options->ops.empty())) {
    __builtin_trap();
  }
  return 0;
}
