// Attributes: the named, list-valued facts that policy conditions compare, carried by
// principals (clearances, department) and by resources (a model's tenant, classification).
// Here, below both, so that the model store can describe a model's access attributes without
// knowing who authenticates.
//
//   Attributes a = {{"tenant", {"acme"}}, {"clearances", {"public", "internal"}}};
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace pillar {

// Attribute values are lists; a single value is a list of one. Conditions compare them with
// equality and set membership (docs/security.md).
using Attributes = absl::flat_hash_map<std::string, std::vector<std::string>>;

}  // namespace pillar
