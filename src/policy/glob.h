// Resource patterns: `*` matches any run of characters (slashes included), everything else
// matches itself. "model:digits/*" matches "model:digits/3"; "*" matches every resource.
#pragma once

#include <string_view>

namespace pillar::policy {

bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace pillar::policy
