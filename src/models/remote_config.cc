#include "models/remote_config.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <span>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::models {
namespace {

constexpr size_t kMaxEndpoints = 64;

// An endpoint as an error may show it: without the credentials, query or fragment a refused one
// may carry (the error reaches logs, the audit log, and an admin's client as a version's "not
// ready" reason), its control bytes escaped, cut to 200 bytes. Everything up to the last '@'
// after the scheme is taken for credentials, wherever a '/', '?' or '#' falls in it, and hidden
// before anything is cut (review helper-126: a password holding '/' and a token longer than the
// cut were shown).
std::string Shown(std::string_view url) {
  // A scheme only where the URL starts with one (letters, then "://"): a "://" further on may
  // come after the credentials (review helper-127: "alice:s3cret@gpu:8000/https://x").
  const size_t scheme = url.find("://");
  const bool has_scheme = scheme != std::string_view::npos && scheme > 0 && scheme <= 8 &&
                          std::all_of(url.begin(), url.begin() + scheme,
                                      [](unsigned char c) { return std::isalpha(c) != 0; });
  const size_t start = has_scheme ? scheme + 3 : 0;
  std::string shown(url.substr(0, start));
  std::string_view rest = url.substr(start);
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    shown.append("(credentials)@");
    rest.remove_prefix(at + 1);
  }
  const size_t query = rest.find_first_of("?#");
  shown.append(rest.substr(0, query));
  shown = ForTerminal(shown).substr(0, 200);
  if (query != std::string_view::npos) shown.append("?(query)");
  return shown;
}

// `where`: "file:line" of the entry (TomlWhere).
[[nodiscard]] absl::Status CheckEndpoint(std::string_view url, std::string_view where) {
  auto error = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat(where, ": [remote] endpoint '", Shown(url), "' ", why));
  };
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else {
    return error("must start with http:// or https://");
  }
  if (rest.empty() || rest.front() == '/' || rest.front() == ':') return error("has no host");
  if (rest.find('@') != std::string_view::npos) {
    return error("carries credentials; put them in credentials_file");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return error("has a query or a fragment");
  }
  for (char c : rest) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') return error("has a blank or control");
  }
  return absl::OkStatus();
}

// The upstream's model name and version go into the request line: plain names only.
[[nodiscard]] absl::Status CheckName(std::string_view key, std::string_view value,
                                     std::string_view where) {
  bool ok = value.size() <= 128;
  for (char c : value) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-');
  }
  if (ok && value != "." && value != "..") return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(where, ": [remote] ", key, " must be up to 128 letters, digits, '.', '_' or '-'"));
}

// api_key_header: an HTTP field name (a token of letters, digits and '-').
[[nodiscard]] absl::Status CheckHeaderName(std::string_view name, std::string_view where) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(where, ": [remote] api_key_header must be a header name (letters, digits, '-')"));
}

// api_version goes into the request line's query: letters, digits, '.', '-' and '_' only.
[[nodiscard]] absl::Status CheckQueryValue(std::string_view value, std::string_view where) {
  bool ok = value.size() <= 64;
  for (char c : value) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(where, ": [remote] api_version must be up to 64 letters, digits, '.', '_' or '-'"));
}

}  // namespace

std::string EndpointPlace(std::string_view url) {
  std::string place(url);
  while (!place.empty() && place.back() == '/') place.pop_back();
  const size_t host_start = place.find("//") == std::string::npos ? 0 : place.find("//") + 2;
  const size_t host_end = std::min(place.size(), place.find('/', host_start));
  for (size_t i = 0; i < host_end; ++i) {
    place[i] = char(std::tolower(static_cast<unsigned char>(place[i])));
  }
  const size_t colon = place.rfind(':', host_end);
  const size_t bracket = place.rfind(']', host_end);  // an IPv6 address's end
  if (colon != std::string::npos && colon > host_start &&
      (bracket == std::string::npos || bracket < colon)) {
    size_t zeros = colon + 1;
    while (zeros + 1 < host_end && place[zeros] == '0') ++zeros;
    place.erase(colon + 1, zeros - colon - 1);
  }
  return place;
}

namespace {

// `endpoints`: each a URL string, or an inline table with url, weight, priority and zone, and
// the upstream's own name for the model where `signed_file` (a model.toml).
[[nodiscard]] absl::Status ReadEndpoints(const toml::table& remote, std::string_view source,
                                         bool signed_file, std::vector<RemoteEndpoint>& out) {
  const toml::node* node = remote.get("endpoints");
  if (node == nullptr) return absl::OkStatus();
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(TomlWhere(source, node), ": [remote] endpoints must be an array of URLs or tables"));
  }
  std::set<std::string> seen;
  for (const toml::node& entry : *array) {
    const std::string where = TomlWhere(source, &entry);
    RemoteEndpoint endpoint;
    if (const toml::value<std::string>* url = entry.as_string()) {
      endpoint.url = url->get();
    } else if (const toml::table* table = entry.as_table()) {
      TomlSection fields(table, "remote.endpoints", source);
      PILLAR_RETURN_IF_ERROR(fields.ReadString("url", endpoint.url));
      PILLAR_RETURN_IF_ERROR(fields.ReadInt("weight", endpoint.weight, 1, 1000));
      PILLAR_RETURN_IF_ERROR(fields.ReadInt("priority", endpoint.priority, 1, 100));
      PILLAR_RETURN_IF_ERROR(fields.ReadString("zone", endpoint.zone));
      // Which model an upstream is asked for stays with the signature, as [remote] model does
      // (review helper-93: a backends file sent a signed language model's calls, with its
      // credentials, to another upstream model).
      if (const toml::node* model = table->get("model"); model != nullptr && !signed_file) {
        return absl::InvalidArgumentError(
            StrCat(source, ":", model->source().begin.line,
                   ": an endpoint's model stays with "
                   "the signature (model.toml): an endpoint listed here by a URL the signed "
                   "[remote] lists keeps the model it names there"));
      }
      PILLAR_RETURN_IF_ERROR(fields.ReadString("model", endpoint.model));
      PILLAR_RETURN_IF_ERROR(fields.CheckNoUnknownKeys());
    } else {
      return absl::InvalidArgumentError(
          StrCat(where, ": [remote] each endpoint is a URL or a table with a url"));
    }
    PILLAR_RETURN_IF_ERROR(CheckEndpoint(endpoint.url, where));
    // The same place spelled twice ("http://a:1" and "http://A:1/") is the same endpoint, and
    // would count twice for weights, ejection shares and a group's healthy half.
    if (!seen.insert(EndpointPlace(endpoint.url)).second) {
      return absl::InvalidArgumentError(
          StrCat(where, ": [remote] endpoint '", Shown(endpoint.url), "' is listed twice"));
    }
    PILLAR_RETURN_IF_ERROR(CheckName("endpoint model", endpoint.model, where));
    out.push_back(std::move(endpoint));
  }
  return absl::OkStatus();
}

// "500-599" or "429": an inclusive range of HTTP statuses.
[[nodiscard]] absl::Status ParseStatusRange(std::string_view text, std::string_view where,
                                            std::pair<int, int>& out) {
  const size_t dash = text.find('-');
  const std::string_view low = text.substr(0, dash);
  const std::string_view high = dash == std::string_view::npos ? low : text.substr(dash + 1);
  int64_t from = 0, to = 0;
  if (!ParseInt(low, &from) || !ParseInt(high, &to) || from < 100 || to > 599 || from > to) {
    return absl::InvalidArgumentError(
        StrCat(where, " status_codes: '", text.substr(0, 40),
               "' is not a status (100-599) or a range of them such as \"500-599\""));
  }
  out = {int(from), int(to)};
  return absl::OkStatus();
}

// [remote.breaker] or [remote.backend_breaker].
[[nodiscard]] absl::Status ReadBreaker(const toml::table& remote, std::string_view key,
                                       std::string_view source, BreakerRule& out) {
  const toml::node* node = remote.get(key);
  if (node == nullptr) return absl::OkStatus();
  const std::string name = StrCat("remote.", key);
  if (!node->is_table()) {
    return absl::InvalidArgumentError(StrCat(source, ": [", name, "] must be a table"));
  }
  TomlSection section(node->as_table(), name, source);
  PILLAR_RETURN_IF_ERROR(section.ReadInt("failure_count", out.failure_count, 0, 1'000'000));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("failure_percentage", out.failure_percentage, 0, 100));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("min_requests", out.min_requests, 1, 1'000'000));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("interval_ms", out.interval_ms, 100, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("trip_duration_ms", out.trip_duration_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(section.ReadBool("accept_retry_after", out.accept_retry_after));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("half_open_probes", out.half_open_probes, 1, 1000));
  const toml::table& table = *node->as_table();
  if (section.Contains("status_codes")) {
    const std::string where =
        StrCat(TomlWhere(source, table.get("status_codes")), ": [", name, "]");
    std::vector<std::string> ranges;
    PILLAR_RETURN_IF_ERROR(section.ReadStrings("status_codes", ranges));
    out.status_codes.clear();
    for (const std::string& text : ranges) {
      PILLAR_RETURN_IF_ERROR(ParseStatusRange(text, where, out.status_codes.emplace_back()));
    }
  }
  if (section.Contains("error_reasons")) {
    const std::string where =
        StrCat(TomlWhere(source, table.get("error_reasons")), ": [", name, "]");
    std::vector<std::string> reasons;
    PILLAR_RETURN_IF_ERROR(section.ReadStrings("error_reasons", reasons));
    out.count_connect = out.count_timeout = out.count_bad_reply = false;
    for (const std::string& reason : reasons) {
      bool* flag = reason == "connect"     ? &out.count_connect
                   : reason == "timeout"   ? &out.count_timeout
                   : reason == "bad_reply" ? &out.count_bad_reply
                                           : nullptr;
      if (flag == nullptr) {
        return absl::InvalidArgumentError(
            StrCat(where, " error_reasons: '", reason.substr(0, 40),
                   "' is not one of \"connect\", \"timeout\", \"bad_reply\""));
      }
      *flag = true;
    }
  }
  return section.CheckNoUnknownKeys();
}

// [remote.health_check]
[[nodiscard]] absl::Status ReadHealthCheck(const toml::table& remote, std::string_view source,
                                           HealthCheck& out) {
  const toml::node* node = remote.get("health_check");
  if (node == nullptr) return absl::OkStatus();
  if (!node->is_table()) {
    return absl::InvalidArgumentError(StrCat(source, ": [remote.health_check] must be a table"));
  }
  TomlSection section(node->as_table(), "remote.health_check", source);
  PILLAR_RETURN_IF_ERROR(section.ReadBool("enabled", out.enabled));
  PILLAR_RETURN_IF_ERROR(section.ReadString("path", out.path));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("interval_ms", out.interval_ms, 100, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("timeout_ms", out.timeout_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("healthy_threshold", out.healthy_threshold, 1, 100));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("unhealthy_threshold", out.unhealthy_threshold, 1, 100));
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  // The path goes into the request line: a plain absolute path only.
  bool plain = !out.path.empty() && out.path.front() == '/' && out.path.size() <= 256;
  for (char c : out.path) {
    plain = plain && static_cast<unsigned char>(c) > ' ' && c != '\x7f' && c != '?' && c != '#';
  }
  if (!plain) {
    return absl::InvalidArgumentError(
        StrCat(TomlWhere(source, node->as_table()->get("path")),
               ": [remote.health_check] path must start with '/' and hold no blank, '?' or '#'"));
  }
  return absl::OkStatus();
}

// [remote.hedge]
[[nodiscard]] absl::Status ReadHedge(const toml::table& remote, std::string_view source,
                                     HedgeConfig& out) {
  const toml::node* node = remote.get("hedge");
  if (node == nullptr) return absl::OkStatus();
  if (!node->is_table()) {
    return absl::InvalidArgumentError(StrCat(source, ": [remote.hedge] must be a table"));
  }
  TomlSection section(node->as_table(), "remote.hedge", source);
  PILLAR_RETURN_IF_ERROR(section.ReadBool("enabled", out.enabled));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("quantile", out.quantile, 0.5, 0.999));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("min_delay_ms", out.min_delay_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_hedges", out.max_hedges, 1, 4));
  return section.CheckNoUnknownKeys();
}

}  // namespace

bool BreakerRule::CountsStatus(int status) const {
  for (const auto& [from, to] : status_codes) {
    if (status >= from && status <= to) return true;
  }
  return false;
}

namespace {

// The keys of a [remote] table that may change without a new signature (a backends file's
// table): where traffic goes and how it is balanced, checked, broken, retried and timed.
// `signed_file`: a model.toml's [remote], not a backends file's table over it.
[[nodiscard]] absl::Status ReadOperationalKeys(TomlSection& section, const toml::table& table,
                                               std::string_view source, bool signed_file,
                                               RemoteConfig& out) {
  std::vector<RemoteEndpoint> before;
  if (table.contains("endpoints")) before.swap(out.endpoints);
  PILLAR_RETURN_IF_ERROR(ReadEndpoints(table, source, signed_file, out.endpoints));
  // A URL the signature lists (spelled as EndpointPlace reads it) keeps the name it gives the
  // model there (review helper-94: a trailing slash lost it); any other gets [remote] model's.
  for (RemoteEndpoint& endpoint : signed_file ? std::span<RemoteEndpoint>() : out.endpoints) {
    const std::string place = EndpointPlace(endpoint.url);
    for (const RemoteEndpoint& listed : before) {
      if (EndpointPlace(listed.url) == place) endpoint.model = listed.model;
    }
  }
  PILLAR_RETURN_IF_ERROR(ReadBreaker(table, "breaker", source, out.breaker));
  PILLAR_RETURN_IF_ERROR(ReadBreaker(table, "backend_breaker", source, out.backend_breaker));
  PILLAR_RETURN_IF_ERROR(ReadHealthCheck(table, source, out.health_check));
  PILLAR_RETURN_IF_ERROR(ReadHedge(table, source, out.hedge));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("timeout_ms", out.timeout_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("connect_timeout_ms", out.connect_timeout_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("attempt_timeout_ms", out.attempt_timeout_ms, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("max_response_bytes", out.max_response_bytes, 1024, int64_t{1} << 32));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("connections", out.connections, 1, 1024));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_queue", out.max_queue, 0, 1 << 20));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("consecutive_failures", out.consecutive_failures, 1, 1000));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("base_ejection_ms", out.base_ejection_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("max_ejection_ms", out.max_ejection_ms, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_ejection_percent", out.max_ejection_percent, 0, 100));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("retry_budget_percent", out.retry_budget_percent, 0, 100));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("min_retry_concurrency", out.min_retry_concurrency, 0, 100'000));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("retry_backoff_base_ms", out.retry_backoff_base_ms, 0, 60'000));
  return section.ReadInt("retry_backoff_max_ms", out.retry_backoff_max_ms, 0, 600'000);
}

// "source:line" of `key` in `table`, or of the table where the key is not in it (a value that
// came from the signed file, checked again against this one).
std::string AtKey(std::string_view source, const toml::table& table, std::string_view key) {
  const toml::node* node = table.get(key);
  return TomlWhere(source, node != nullptr ? node : &table);
}

// What must hold of a whole [remote] configuration, however it was put together: `table` is the
// one just read (model.toml's [remote], or a backends file's table over it), for the lines.
[[nodiscard]] absl::Status CheckRemote(const RemoteConfig& out, const toml::table& table,
                                       std::string_view source) {
  const std::string endpoints_at = AtKey(source, table, "endpoints");
  if (out.endpoints.empty() || out.endpoints.size() > kMaxEndpoints) {
    return absl::InvalidArgumentError(
        StrCat(endpoints_at, ": [remote] endpoints must list 1 to ", kMaxEndpoints, " URLs"));
  }
  // Each endpoint was checked where it is listed (ReadEndpoints): a whole configuration takes
  // its endpoints from one table, this one's or the signed one's.
  PILLAR_RETURN_IF_ERROR(CheckName("model", out.model, AtKey(source, table, "model")));
  PILLAR_RETURN_IF_ERROR(CheckName("version", out.version, AtKey(source, table, "version")));
  if (out.hedge.enabled && !out.idempotent) {
    return absl::InvalidArgumentError(
        StrCat(AtKey(source, table, "hedge"),
               ": [remote.hedge] needs an idempotent model: a hedge sends it twice"));
  }
  if (out.client_certificate.empty() != out.client_key.empty()) {
    const std::string_view given =
        out.client_certificate.empty() ? "client_key" : "client_certificate";
    return absl::InvalidArgumentError(StrCat(AtKey(source, table, given),
                                             ": [remote] client_certificate and client_key go "
                                             "together"));
  }
  return absl::OkStatus();
}

void AllowSubtables(TomlSection& section) {
  for (const char* key : {"endpoints", "breaker", "backend_breaker", "health_check", "hedge"}) {
    section.Allow(key);
  }
}

}  // namespace

[[nodiscard]] absl::Status ReadRemoteSection(const toml::table& root, std::string_view source,
                                             RemoteConfig& out) {
  const toml::node* node = root.get("remote");
  if (node == nullptr || !node->is_table()) {
    return absl::InvalidArgumentError(StrCat(
        source, ": platform = \"remote\" or \"openai\" needs a [remote] table with its endpoints"));
  }
  TomlSection section(node->as_table(), "remote", source);
  AllowSubtables(section);
  PILLAR_RETURN_IF_ERROR(ReadOperationalKeys(section, *node->as_table(), source, true, out));
  // What stays with the signature: who the upstream is told the model is, whether it may be sent
  // twice, and what pillar presents to it.
  PILLAR_RETURN_IF_ERROR(section.ReadString("model", out.model));
  PILLAR_RETURN_IF_ERROR(section.ReadString("version", out.version));
  PILLAR_RETURN_IF_ERROR(section.ReadBool("idempotent", out.idempotent));
  PILLAR_RETURN_IF_ERROR(section.ReadString("credentials_file", out.credentials_file));
  PILLAR_RETURN_IF_ERROR(section.ReadString("ca_file", out.ca_file));
  PILLAR_RETURN_IF_ERROR(section.ReadString("client_certificate", out.client_certificate));
  PILLAR_RETURN_IF_ERROR(section.ReadString("client_key", out.client_key));
  PILLAR_RETURN_IF_ERROR(section.ReadString("api_key_header", out.api_key_header));
  PILLAR_RETURN_IF_ERROR(section.ReadString("api_version", out.api_version));
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  const toml::table& remote = *node->as_table();
  PILLAR_RETURN_IF_ERROR(
      CheckHeaderName(out.api_key_header, AtKey(source, remote, "api_key_header")));
  PILLAR_RETURN_IF_ERROR(CheckQueryValue(out.api_version, AtKey(source, remote, "api_version")));
  return CheckRemote(out, remote, source);
}

[[nodiscard]] absl::Status ApplyRemoteOverride(const toml::table& table, std::string_view name,
                                               std::string_view source, RemoteConfig& out) {
  TomlSection section(&table, std::string(name), source);
  AllowSubtables(section);
  PILLAR_RETURN_IF_ERROR(ReadOperationalKeys(section, table, source, false, out));
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  return CheckRemote(out, table, source);
}

}  // namespace pillar::models
