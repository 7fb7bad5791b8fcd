// A Principal as text, for what outlives the request that authenticated it: an asynchronous job
// runs as the principal that submitted it, after a restart too. The encoding is a JSON object
// (docs/formats/api_keys.md, "jobs"); decoding refuses anything else with a clear error.
//
//   std::string text = EncodePrincipal(*ex.principal);
//   absl::StatusOr<Principal> who = DecodePrincipal(text);
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "identity/principal.h"

namespace pillar::identity {

std::string EncodePrincipal(const Principal& principal);
[[nodiscard]] absl::StatusOr<Principal> DecodePrincipal(std::string_view text);

}  // namespace pillar::identity
