// The HTTP listener's sections of pillar.toml: [data] and [admin] (each a ListenerOptions) and
// [limits] (the Limits every listener shares). Each key is described in
// docs/configuration.md; a wrong type, a value out of range or an unknown key is an error
// naming the file, the table and the key.
//
//   http::ListenerOptions data = http::ListenerNamed("data", 8000);
//   PILLAR_RETURN_IF_ERROR(http::ReadListenerSection(root, "pillar.toml", base, data));
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "http/server.h"

namespace pillar::http {

ListenerOptions ListenerNamed(std::string name, uint16_t port);

// Reads the table named listener.name; relative file names are taken from `base`.
[[nodiscard]] absl::Status ReadListenerSection(const toml::table& root, std::string_view source,
                                               const std::string& base, ListenerOptions& listener);
[[nodiscard]] absl::Status ReadLimitsSection(const toml::table& root, std::string_view source,
                                             Limits& limits);

}  // namespace pillar::http
