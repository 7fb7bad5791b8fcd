// Fuzzes the backends file (models/backends_file.h): any text parses or is refused with an error,
// and what a parsed file gives a remote version is a whole, valid [remote] configuration.
#include <cstdint>
#include <string_view>

#include "models/backends_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<pillar::models::BackendsFile> file = pillar::models::BackendsFile::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  pillar::models::RemoteConfig signed_remote;
  signed_remote.endpoints.push_back({"http://10.0.0.1:8000", 1, 1, "a", ""});
  for (std::string_view model : {"digits", "m", "a"}) {
    absl::StatusOr<pillar::models::RemoteConfig> applied = file->Apply(model, signed_remote);
    if (!applied.ok()) continue;
    if (applied->endpoints.empty() || applied->endpoints.size() > 64) __builtin_trap();
    if (applied->credentials_file != signed_remote.credentials_file) __builtin_trap();
  }
  return 0;
}
