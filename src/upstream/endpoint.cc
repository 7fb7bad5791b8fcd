#include "upstream/endpoint.h"

#include <charconv>

#include "common/strings.h"
#include "models/remote_config.h"

namespace pillar::upstream {

[[nodiscard]] absl::StatusOr<Endpoint> ParseEndpoint(std::string_view url) {
  auto error = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("endpoint '", url.substr(0, 200), "': ", why));
  };
  for (char c : url) {
    // The URL becomes a Host header and a request target: no byte that could end either.
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') {
      return error("has a blank or control character");
    }
  }
  Endpoint e;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    e.tls = true;
    e.port = 443;
  } else {
    return error("must start with http:// or https://");
  }
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  e.url = std::string(url);
  e.place = models::EndpointPlace(url);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    e.base_path = std::string(path);
  }
  if (authority.find_first_of("@?#") != std::string_view::npos) {
    return error("only scheme, host, port and path are allowed");
  }
  e.host_header = std::string(authority);
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return error("an IPv6 address needs its ']'");
    e.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return error("unexpected text after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    e.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (e.host.empty()) return error("has no host");
  for (char c : e.host) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f' || c == '/') {
      return error("the host has a blank or control character");
    }
  }
  if (!port.empty() || authority.back() == ':') {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return error("the port must be 1..65535");
    }
    e.port = uint16_t(value);
  }
  return e;
}

std::string TlsServerName(const Endpoint& endpoint) {
  std::string_view name = endpoint.host;
  if (name.size() > 1 && name.back() == '.') name.remove_suffix(1);
  return std::string(name);
}

}  // namespace pillar::upstream
