// Maps a method and a path to a registered route. Patterns are literal segments and
// `{name}` captures of one segment: "/v2/models/{model}/versions/{version}/infer".
//
//   Router router;
//   router.Add({"POST", "/v2/models/{model}/infer", kInfer, "infer", false});
//   RouteResult r = router.Match("POST", "/v2/models/digits/infer");
// Build the router before serving; Match() is then thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pillar::http {

struct Route {
  std::string method;
  std::string pattern;
  int id = 0;              // what the application dispatches on
  std::string name;        // for logs and metrics
  bool anonymous = false;  // answered without credentials (liveness, readiness only)
};

struct RouteResult {
  enum class Kind { kFound, kNotFound, kMethodNotAllowed };
  Kind kind = Kind::kNotFound;
  const Route* route = nullptr;
  std::vector<std::pair<std::string_view, std::string>> params;
  std::string allowed;  // for 405: the methods the path accepts
};

class Router {
 public:
  void Add(Route route);
  // `target` may carry a query string, which is ignored. Captured segments are
  // percent-decoded; a segment that decodes to '/' or is not valid percent-encoding fails.
  RouteResult Match(std::string_view method, std::string_view target) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
  std::vector<size_t> segments_;  // of each route's pattern: a path of another count is skipped
};

}  // namespace pillar::http
