// One upstream model server, from the base URL a [remote] table lists:
//
//   absl::StatusOr<Endpoint> e = ParseEndpoint("https://gpu-2.internal:8443/serving");
//   e->host == "gpu-2.internal", e->port == 8443, e->tls, e->base_path == "/serving"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar::upstream {

struct Endpoint {
  std::string url;  // as configured, without a trailing '/': names it in messages
  // What it is known by (models::EndpointPlace): across reloads of a backends file and between
  // instances sharing breakers, "http://A:08000" is "http://a:8000".
  std::string place;
  std::string host;  // a name or an address (IPv6 without its brackets)
  uint16_t port = 80;
  bool tls = false;
  std::string base_path;    // "" or "/prefix", prepended to /v2/...
  std::string host_header;  // Host: host[:port], as the URL spells it
};

// InvalidArgument for anything but http[s]://host[:port][/path].
[[nodiscard]] absl::StatusOr<Endpoint> ParseEndpoint(std::string_view url);

// The name a TLS endpoint's certificate must carry and its Server Name Indication: its host
// without the trailing dot of a fully qualified name ("gpu-2.internal." -> "gpu-2.internal"),
// which is for resolving it only (RFC 6066 sends names without it, and OpenSSL matches no
// certificate name against one with it).
std::string TlsServerName(const Endpoint& endpoint);

}  // namespace pillar::upstream
