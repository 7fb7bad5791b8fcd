#include "app/config.h"

#include <filesystem>
#include <set>
#include <string>

#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::app {
namespace {

// Every top-level key names a known section (a table, or [[mtls_client]]'s array of tables).
[[nodiscard]] absl::Status CheckSections(const toml::table& root, std::string_view source) {
  static const std::set<std::string, std::less<>> kSections = {
      "server", "data",    "admin", "limits", "repository", "state", "logging", "runtime",
      "policy", "limiter", "jwt",   "audit",  "upstream",   "jobs",  "guard"};
  for (const auto& [key, value] : root) {
    if (key.str() == "mtls_client") {
      if (!value.is_array_of_tables()) {
        return absl::InvalidArgumentError(StrCat(source, ": mtls_client must be [[mtls_client]]"));
      }
      continue;
    }
    if (!kSections.contains(key.str()) || !value.is_table()) {
      return absl::InvalidArgumentError(StrCat(source, ": unknown section '", key.str(), "'"));
    }
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadServerSection(const toml::table& root, std::string_view source,
                                             Config& config) {
  TomlSection s(root["server"].as_table(), "server", source);
  PILLAR_RETURN_IF_ERROR(s.ReadInt("threads", config.threads, 0, 256));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("drain_timeout_ms", config.drain_timeout, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("strict_readiness", config.strict_readiness));
  PILLAR_RETURN_IF_ERROR(s.ReadString("zone", config.zone));
  return s.CheckNoUnknownKeys();
}

// [state], [logging], [runtime], [policy] and [upstream]: a few keys each, read by the wiring
// alone.
[[nodiscard]] absl::Status ReadWiringSections(const toml::table& root, std::string_view source,
                                              const std::string& base, Config& config) {
  TomlSection state(root["state"].as_table(), "state", source);
  PILLAR_RETURN_IF_ERROR(state.ReadPath("path", config.state_path, base));
  PILLAR_RETURN_IF_ERROR(state.ReadMillis("key_refresh_ms", config.key_refresh, 10, 60'000));
  PILLAR_RETURN_IF_ERROR(state.ReadMillis("key_touch_ms", config.key_touch, 10, 3'600'000));
  PILLAR_RETURN_IF_ERROR(state.CheckNoUnknownKeys());
  TomlSection logging(root["logging"].as_table(), "logging", source);
  PILLAR_RETURN_IF_ERROR(logging.ReadPath("access_log", config.access_log, base));
  PILLAR_RETURN_IF_ERROR(logging.CheckNoUnknownKeys());
  TomlSection runtime(root["runtime"].as_table(), "runtime", source);
  PILLAR_RETURN_IF_ERROR(runtime.ReadInt("torch_threads", config.torch_threads, 1, 256));
  PILLAR_RETURN_IF_ERROR(runtime.CheckNoUnknownKeys());
  TomlSection policy(root["policy"].as_table(), "policy", source);
  PILLAR_RETURN_IF_ERROR(policy.ReadPath("file", config.policy_path, base));
  PILLAR_RETURN_IF_ERROR(policy.ReadMillis("reload_ms", config.policy_reload, 0, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(policy.CheckNoUnknownKeys());
  TomlSection upstream(root["upstream"].as_table(), "upstream", source);
  PILLAR_RETURN_IF_ERROR(upstream.ReadPath("backends_file", config.backends_file, base));
  PILLAR_RETURN_IF_ERROR(
      upstream.ReadMillis("backends_reload_ms", config.backends_reload, 0, kMaxConfigMillis));
  return upstream.CheckNoUnknownKeys();
}

// Each [[mtls_client]] against the listeners whose certificates may name it: a listener it names
// must ask for certificates; and where both listeners do, by different CAs or by different names
// of the certificate, each must say which it is for (found by review helper-59: a certificate
// from the CA trusted for tenants on [data] could name the admins' client of [admin]).
[[nodiscard]] absl::Status CheckCertificateClients(const Config& config, std::string_view source) {
  using Certificates = http::ListenerOptions::ClientCertificates;
  const auto asks = [](const http::ListenerOptions& l) {
    return l.client_certificates != Certificates::kNone;
  };
  // Revocation lists are part of the trust (found by review helper-61: a certificate revoked on
  // [data], whose client_crl lists it, named its client on an [admin] with the same CA and none).
  const bool ambiguous = asks(config.data) && asks(config.admin) &&
                         (config.data.client_ca != config.admin.client_ca ||
                          config.data.client_crl != config.admin.client_crl ||
                          config.data.client_identity != config.admin.client_identity);
  for (const auto& [identity, client] : config.certificate_clients) {
    if (ambiguous && client.listeners.empty()) {
      return absl::InvalidArgumentError(StrCat(
          source, ": [[mtls_client]] '", identity,
          "' must say which listeners it is for (listeners = [\"data\"] or [\"admin\"]): [data] "
          "and [admin] trust different client CAs, check different revocation lists or name "
          "clients by different fields"));
    }
    // Two revocation lists: a certificate one of them revokes would still name this client on
    // the other listener (found by review helper-62). Whether the CAs are one is not told by
    // their paths (a symlink, a copy: helper-63), so any two lists refuse a client of both.
    if (client.listeners.size() > 1 && config.data.client_crl != config.admin.client_crl) {
      return absl::InvalidArgumentError(StrCat(
          source, ": [[mtls_client]] '", identity,
          "' is for both listeners, which check different revocation lists (client_crl): a "
          "certificate one revokes would still name it on the other; give both listeners the "
          "same client_crl, or this client one listener"));
    }
    for (const std::string& name : client.listeners) {
      if (!asks(name == "data" ? config.data : config.admin)) {
        return absl::InvalidArgumentError(
            StrCat(source, ": [[mtls_client]] '", identity, "' is for [", name,
                   "], which asks for no client certificate (client_certificates)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                                 const std::string& base) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table root, ParseToml(text, source));
  PILLAR_RETURN_IF_ERROR(CheckSections(root, source));
  Config config;
  PILLAR_RETURN_IF_ERROR(ReadServerSection(root, source, config));
  PILLAR_RETURN_IF_ERROR(http::ReadListenerSection(root, source, base, config.data));
  PILLAR_RETURN_IF_ERROR(http::ReadListenerSection(root, source, base, config.admin));
  PILLAR_RETURN_IF_ERROR(http::ReadLimitsSection(root, source, config.limits));
  PILLAR_ASSIGN_OR_RETURN(config.repository, models::ReadRepositorySection(root, source, base));
  PILLAR_RETURN_IF_ERROR(ReadWiringSections(root, source, base, config));
  PILLAR_ASSIGN_OR_RETURN(config.limiter, limits::ReadLimiterSection(root, source, base));
  PILLAR_ASSIGN_OR_RETURN(config.jwt, identity::ReadJwtSection(root, source, base));
  PILLAR_ASSIGN_OR_RETURN(config.audit, audit::ReadAuditSection(root, source, base));
  PILLAR_ASSIGN_OR_RETURN(config.jobs, jobs::ReadJobsSection(root, source, base));
  PILLAR_ASSIGN_OR_RETURN(config.certificate_clients,
                          identity::ReadCertificateClients(root, source));
  PILLAR_RETURN_IF_ERROR(CheckCertificateClients(config, source));
  if (const toml::node* guard = root.get("guard"); guard != nullptr) {
    PILLAR_ASSIGN_OR_RETURN(guard::GuardConfig parsed,
                            guard::ParseGuardConfig(guard->as_table(), source, base));
    config.guard = std::make_shared<const guard::GuardConfig>(std::move(parsed));
  }
  return config;
}

[[nodiscard]] absl::StatusOr<Config> LoadConfig(const std::string& path) {
  if (path.empty()) return Config{};
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, 1 << 20));
  std::string base = std::filesystem::absolute(path).parent_path().string();
  return ParseConfig(text, path, base);
}

}  // namespace pillar::app
