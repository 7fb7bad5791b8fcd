// Fuzzes what pillar does with the bytes of an HTTP request before any stage runs: Beast's
// parser under pillar's limits, the router's matching and percent-decoding of the target, and
// the API key parser on the Authorization header.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string_view>
#include <utility>

#include "http/router.h"
#include "identity/api_key.h"

namespace {

namespace bhttp = boost::beast::http;

const pillar::http::Router& TheRouter() {
  static const pillar::http::Router router = [] {
    pillar::http::Router r;
    r.Add({"GET", "/v2/health/live", 1, "live", true});
    r.Add({"GET", "/v2/models/{model}", 2, "meta", false});
    r.Add({"GET", "/v2/models/{model}/versions/{version}/ready", 3, "ready", false});
    r.Add({"POST", "/v2/models/{model}/versions/{version}/infer", 4, "infer", false});
    return r;
  }();
  return router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(64 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  size_t used = parser.put(boost::asio::buffer(data, size), ec);
  (void)used;
  if (ec || !parser.is_header_done()) return 0;
  const auto& request = parser.get();
  std::string method(request.method_string().data(), request.method_string().size());
  std::string target(request.target().data(), request.target().size());
  pillar::http::RouteResult route = TheRouter().Match(method, target);
  if (route.kind == pillar::http::RouteResult::Kind::kFound) {
    for (const auto& [name, value] : route.params) {
      if (value.find('/') != std::string::npos) __builtin_trap();  // a capture never holds a slash
    }
  }
  auto authorization = request[bhttp::field::authorization];
  if (authorization.size() > 7) {
    (void)pillar::identity::ParseApiKey(
        std::string_view(authorization.data() + 7, authorization.size() - 7));
  }
  return 0;
}
