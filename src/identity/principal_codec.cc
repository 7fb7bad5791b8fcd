#include "identity/principal_codec.h"

#include <simdjson.h>

#include <algorithm>

#include "common/crypto.h"
#include "common/json_writer.h"
#include "common/strings.h"

namespace pillar::identity {
namespace {

constexpr std::string_view kMethods[] = {"api_key", "jwt", "mtls"};

[[nodiscard]] absl::Status Bad(std::string_view what) {
  return absl::DataLossError(StrCat("stored principal: ", what));
}

[[nodiscard]] absl::StatusOr<std::vector<std::string>> Strings(simdjson::dom::element value) {
  simdjson::dom::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) return Bad("a list is not an array");
  std::vector<std::string> out;
  for (simdjson::dom::element item : array) {
    std::string_view text;
    if (item.get_string().get(text) != simdjson::SUCCESS) return Bad("a list holds a non-string");
    out.emplace_back(text);
  }
  return out;
}

}  // namespace

std::string EncodePrincipal(const Principal& principal) {
  JsonWriter w(256);
  w.BeginObject();
  w.Key("method");
  w.String(kMethods[int(principal.method)]);
  w.Key("id");
  w.String(principal.id);
  w.Key("tenant");
  w.String(principal.tenant);
  w.Key("key_id");
  w.String(principal.key_id);
  w.Key("expires_us");
  w.Int(principal.expires_us);
  w.Key("roles");
  w.BeginArray();
  for (const std::string& role : principal.roles) w.String(role);
  w.EndArray();
  w.Key("attributes");
  w.BeginObject();
  // Sorted, so that one principal always encodes to the same text.
  std::vector<const Attributes::value_type*> sorted;
  for (const auto& entry : principal.attributes) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (const auto* entry : sorted) {
    w.Key(entry->first);
    w.BeginArray();
    for (const std::string& v : entry->second) w.String(v);
    w.EndArray();
  }
  w.EndObject();
  // What checks the credential again (principal.h); absent when empty, as before they existed.
  if (!principal.signing_key.empty()) {
    w.Key("signing_key");
    w.String(principal.signing_key);
    w.Key("issuer");
    w.String(principal.issuer);
    w.Key("audiences");
    w.BeginArray();
    for (const std::string& a : principal.audiences) w.String(a);
    w.EndArray();
  }
  if (!principal.certificate.empty()) {
    w.Key("certificate");
    w.String(Base64Encode(principal.certificate));
    w.Key("listener");
    w.String(principal.listener);
  }
  w.EndObject();
  return std::move(w).Take();
}

[[nodiscard]] absl::StatusOr<Principal> DecodePrincipal(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(text.data(), text.size()).get_object().get(root) != simdjson::SUCCESS) {
    return Bad("not a JSON object");
  }
  Principal p;
  std::string_view method, id, tenant, key_id;
  if (root["method"].get_string().get(method) != simdjson::SUCCESS ||
      root["id"].get_string().get(id) != simdjson::SUCCESS ||
      root["tenant"].get_string().get(tenant) != simdjson::SUCCESS ||
      root["key_id"].get_string().get(key_id) != simdjson::SUCCESS ||
      root["expires_us"].get_int64().get(p.expires_us) != simdjson::SUCCESS) {
    return Bad("a field is missing or of the wrong type");
  }
  const auto* found = std::find(std::begin(kMethods), std::end(kMethods), method);
  if (found == std::end(kMethods)) return Bad(StrCat("unknown method '", method, "'"));
  if (id.empty()) return Bad("empty id");
  p.method = static_cast<AuthMethod>(found - std::begin(kMethods));
  p.id = std::string(id);
  p.tenant = std::string(tenant);
  p.key_id = std::string(key_id);
  simdjson::dom::element roles;
  simdjson::dom::object attributes;
  if (root["roles"].get(roles) != simdjson::SUCCESS ||
      root["attributes"].get_object().get(attributes) != simdjson::SUCCESS) {
    return Bad("roles or attributes missing");
  }
  absl::StatusOr<std::vector<std::string>> role_list = Strings(roles);
  if (!role_list.ok()) return role_list.status();
  p.roles = std::move(*role_list);
  for (auto [name, values] : attributes) {
    absl::StatusOr<std::vector<std::string>> list = Strings(values);
    if (!list.ok()) return list.status();
    p.attributes[std::string(name)] = std::move(*list);
  }
  // Optional: records stored before these fields existed have none (and such a job's run
  // refuses a token or a certificate it cannot check again: authenticator.h).
  std::string_view signing_key, certificate, listener;
  if (root["signing_key"].get_string().get(signing_key) == simdjson::SUCCESS) {
    std::string_view issuer;
    simdjson::dom::element audiences;
    if (root["issuer"].get_string().get(issuer) != simdjson::SUCCESS ||
        root["audiences"].get(audiences) != simdjson::SUCCESS) {
      return Bad("a signing key without its issuer and audiences");
    }
    absl::StatusOr<std::vector<std::string>> audience_list = Strings(audiences);
    if (!audience_list.ok()) return audience_list.status();
    p.signing_key = std::string(signing_key);
    p.issuer = std::string(issuer);
    p.audiences = std::move(*audience_list);
  }
  if (root["certificate"].get_string().get(certificate) == simdjson::SUCCESS) {
    absl::StatusOr<std::string> der = Base64Decode(certificate);
    if (!der.ok() || der->empty()) return Bad("certificate is not base64");
    if (root["listener"].get_string().get(listener) != simdjson::SUCCESS || listener.empty()) {
      return Bad("a certificate without its listener");
    }
    p.certificate = std::move(*der);
    p.listener = std::string(listener);
  }
  return p;
}

}  // namespace pillar::identity
