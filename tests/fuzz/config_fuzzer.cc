// Fuzzes the server configuration parser: a config file is untrusted input too. Whatever the
// text, parsing either fails with InvalidArgument or gives a config whose limits can serve.
#include <cstdint>
#include <string_view>

#include "app/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<pillar::app::Config> config = pillar::app::ParseConfig(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml", "/base");
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  if (config->limits.body_limit_bytes == 0 || config->limits.header_limit_bytes < 512)
    __builtin_trap();
  return 0;
}
