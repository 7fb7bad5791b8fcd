#include "http/router.h"

#include <algorithm>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "common/strings.h"

namespace pillar::http {
namespace {

std::optional<std::string> PercentDecode(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out.push_back(segment[i]);
      continue;
    }
    if (i + 2 >= segment.size()) return std::nullopt;
    int hi = HexDigitValue(segment[i + 1]), lo = HexDigitValue(segment[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    char c = static_cast<char>(hi << 4 | lo);
    if (c == '/' || c == '\0') return std::nullopt;
    out.push_back(c);
    i += 2;
  }
  return out;
}

size_t Segments(std::string_view path) {
  return size_t(std::count(path.begin(), path.end(), '/')) + 1;
}

// Matches `path` against `pattern` segment by segment; fills `params` on success. The captured
// segments are decoded only once the whole path matched: a request's path is tried against
// every route until one matches, and most share their first segments with several.
bool MatchPattern(std::string_view pattern, std::string_view path,
                  std::vector<std::pair<std::string_view, std::string>>& params) {
  absl::InlinedVector<std::pair<std::string_view, std::string_view>, 4> captured;
  while (true) {
    size_t want_end = pattern.find('/');
    size_t have_end = path.find('/');
    std::string_view want = pattern.substr(0, want_end);
    std::string_view have = path.substr(0, have_end);
    if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
      if (have.empty()) return false;
      captured.emplace_back(want.substr(1, want.size() - 2), have);
    } else if (want != have) {
      return false;
    }
    if ((want_end == std::string_view::npos) != (have_end == std::string_view::npos)) return false;
    if (want_end == std::string_view::npos) break;
    pattern.remove_prefix(want_end + 1);
    path.remove_prefix(have_end + 1);
  }
  params.clear();
  for (const auto& [name, text] : captured) {
    std::optional<std::string> value = PercentDecode(text);
    if (!value) return false;
    params.emplace_back(name, std::move(*value));
  }
  return true;
}

}  // namespace

void Router::Add(Route route) {
  segments_.push_back(Segments(route.pattern));
  routes_.push_back(std::move(route));
}

RouteResult Router::Match(std::string_view method, std::string_view target) const {
  RouteResult result;
  std::string_view path = target.substr(0, target.find('?'));
  const size_t segments = Segments(path);
  std::vector<std::pair<std::string_view, std::string>> params;
  for (size_t r = 0; r < routes_.size(); ++r) {
    const Route& route = routes_[r];
    if (segments_[r] != segments || !MatchPattern(route.pattern, path, params)) continue;
    if (route.method == method) {
      result.kind = RouteResult::Kind::kFound;
      result.route = &route;
      result.params = std::move(params);
      result.allowed.clear();
      return result;
    }
    result.kind = RouteResult::Kind::kMethodNotAllowed;
    if (!result.allowed.empty()) result.allowed += ", ";
    result.allowed += route.method;
  }
  return result;
}

}  // namespace pillar::http
