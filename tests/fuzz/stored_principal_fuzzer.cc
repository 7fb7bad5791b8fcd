// Fuzzes the decoder of a stored principal (identity::DecodePrincipal): the `principal` column of
// the jobs table is read back from disk, after a restart, and a job runs as what it says. A
// value that decodes re-encodes to text that decodes to the same principal.
#include <cstdint>
#include <string_view>

#include "identity/principal_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pillar::identity::DecodePrincipal;
  using pillar::identity::EncodePrincipal;
  auto decoded = DecodePrincipal(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!decoded.ok()) return 0;
  if (decoded->id.empty()) __builtin_trap();  // refused by the decoder
  const std::string text = EncodePrincipal(*decoded);
  auto again = DecodePrincipal(text);
  if (!again.ok() || EncodePrincipal(*again) != text || again->id != decoded->id ||
      again->method != decoded->method || again->expires_us != decoded->expires_us ||
      again->certificate != decoded->certificate || again->listener != decoded->listener ||
      again->signing_key != decoded->signing_key || again->issuer != decoded->issuer) {
    __builtin_trap();
  }
  return 0;
}
