#include "app/config.h"

#include <filesystem>
#include <set>
#include <string>

#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "models/model_aliases.h"
#include "models/version_policy.h"

namespace pillar::app {
namespace {

constexpr int64_t kMaxMillis = 24LL * 3600 * 1000;  // a day: beyond it, a typo

[[nodiscard]] absl::Status ReadMillis(TomlSection& s, std::string_view key, absl::Duration& out) {
  int64_t ms = absl::ToInt64Milliseconds(out);
  PILLAR_RETURN_IF_ERROR(s.ReadInt(key, ms, 1, kMaxMillis));
  out = absl::Milliseconds(ms);
  return absl::OkStatus();
}

std::string Resolve(const std::string& base, const std::string& path) {
  if (path.empty() || path == "-" || base.empty() || std::filesystem::path(path).is_absolute())
    return path;
  return (std::filesystem::path(base) / path).lexically_normal().string();
}

[[nodiscard]] absl::Status ReadListener(const toml::table& root, std::string_view source,
                                        http::ListenerOptions& listener, const std::string& base) {
  TomlSection s(root[listener.name].as_table(), listener.name, source);
  PILLAR_RETURN_IF_ERROR(s.ReadString("address", listener.address));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("port", listener.port, 0, 65535));
  PILLAR_RETURN_IF_ERROR(s.ReadString("tls_certificate", listener.tls_certificate));
  PILLAR_RETURN_IF_ERROR(s.ReadString("tls_private_key", listener.tls_private_key));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("allow_plaintext", listener.allow_plaintext));
  PILLAR_RETURN_IF_ERROR(s.ReadString("client_ca", listener.client_ca));
  std::string certificates = "none", identity = "subject_cn";
  PILLAR_RETURN_IF_ERROR(s.ReadString("client_certificates", certificates));
  PILLAR_RETURN_IF_ERROR(s.ReadString("client_identity", identity));
  using Options = http::ListenerOptions;
  if (certificates == "none") {
    listener.client_certificates = Options::ClientCertificates::kNone;
  } else if (certificates == "optional") {
    listener.client_certificates = Options::ClientCertificates::kOptional;
  } else if (certificates == "require") {
    listener.client_certificates = Options::ClientCertificates::kRequire;
  } else {
    return absl::InvalidArgumentError(StrCat(
        source, ": [", listener.name, "] client_certificates must be none, optional or require"));
  }
  if (identity == "subject_cn") {
    listener.client_identity = Options::ClientIdentity::kSubjectCn;
  } else if (identity == "san_uri") {
    listener.client_identity = Options::ClientIdentity::kSanUri;
  } else if (identity == "san_dns") {
    listener.client_identity = Options::ClientIdentity::kSanDns;
  } else {
    return absl::InvalidArgumentError(StrCat(
        source, ": [", listener.name, "] client_identity must be subject_cn, san_uri or san_dns"));
  }
  listener.tls_certificate = Resolve(base, listener.tls_certificate);
  listener.tls_private_key = Resolve(base, listener.tls_private_key);
  listener.client_ca = Resolve(base, listener.client_ca);
  if (listener.tls_certificate.empty() != listener.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [", listener.name, "] needs both tls_certificate and tls_private_key"));
  }
  return s.CheckNoUnknownKeys();
}

}  // namespace

[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                                 const std::string& base) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table root, ParseToml(text, source));
  static const std::set<std::string> kSections = {"server",     "data",    "admin",   "limits",
                                                  "repository", "state",   "logging", "runtime",
                                                  "policy",     "limiter", "jwt",     "audit"};
  for (const auto& [key, value] : root) {
    if (key.str() == "mtls_client") {
      if (!value.is_array_of_tables()) {
        return absl::InvalidArgumentError(StrCat(source, ": mtls_client must be [[mtls_client]]"));
      }
      continue;
    }
    if (!kSections.contains(std::string(key.str())) || !value.is_table()) {
      return absl::InvalidArgumentError(StrCat(source, ": unknown section '", key.str(), "'"));
    }
  }
  Config config;
  {
    TomlSection s(root["server"].as_table(), "server", source);
    PILLAR_RETURN_IF_ERROR(s.ReadInt("threads", config.threads, 0, 256));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("drain_timeout_ms", config.drain_timeout_ms, 0, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadBool("strict_readiness", config.strict_readiness));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  PILLAR_RETURN_IF_ERROR(ReadListener(root, source, config.data, base));
  PILLAR_RETURN_IF_ERROR(ReadListener(root, source, config.admin, base));
  {
    TomlSection s(root["limits"].as_table(), "limits", source);
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("header_limit_bytes", config.limits.header_limit_bytes, 512, 1 << 20));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("header_fields_limit", config.limits.header_fields_limit, 1, 10'000));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("body_limit_bytes", config.limits.body_limit_bytes, 1, int64_t(1) << 32));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("inflight_bytes_limit", config.limits.inflight_bytes_limit, 1, int64_t(1) << 40));
    // Below this, a request of the largest size allowed could never be served.
    if (config.limits.inflight_bytes_limit <
        config.limits.header_limit_bytes + config.limits.body_limit_bytes) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [limits] inflight_bytes_limit (", config.limits.inflight_bytes_limit,
                 ") must be at least header_limit_bytes + body_limit_bytes (",
                 config.limits.header_limit_bytes + config.limits.body_limit_bytes, ")"));
    }
    PILLAR_RETURN_IF_ERROR(ReadMillis(s, "request_timeout_ms", config.limits.request_timeout));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("body_min_bytes_per_second",
                                     config.limits.body_min_bytes_per_second, 0, int64_t(1) << 32));
    PILLAR_RETURN_IF_ERROR(
        ReadMillis(s, "body_min_rate_grace_ms", config.limits.body_min_rate_grace));
    PILLAR_RETURN_IF_ERROR(ReadMillis(s, "idle_timeout_ms", config.limits.idle_timeout));
    PILLAR_RETURN_IF_ERROR(ReadMillis(s, "write_timeout_ms", config.limits.write_timeout));
    PILLAR_RETURN_IF_ERROR(
        ReadMillis(s, "tls_handshake_timeout_ms", config.limits.tls_handshake_timeout));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("max_connections", config.limits.max_connections, 1, 1'000'000));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  {
    TomlSection s(root["repository"].as_table(), "repository", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("path", config.repository_path));
    PILLAR_RETURN_IF_ERROR(s.ReadString("version_policy", config.version_policy));
    PILLAR_RETURN_IF_ERROR(models::VersionPolicy::Parse(config.version_policy).status());
    s.Allow("policies");
    if (root["repository"]["policies"] && !root["repository"]["policies"].is_table()) {
      return absl::InvalidArgumentError(StrCat(source, ": [repository] policies must be a table"));
    }
    if (const toml::table* policies = root["repository"]["policies"].as_table()) {
      for (const auto& [model, policy] : *policies) {
        if (!policy.is_string()) {
          return absl::InvalidArgumentError(
              StrCat(source, ": [repository.policies] ", model.str(), " must be a string"));
        }
        std::string text = policy.as_string()->get();
        PILLAR_RETURN_IF_ERROR(models::VersionPolicy::Parse(text).status());
        config.model_policies[std::string(model.str())] = text;
      }
    }
    PILLAR_RETURN_IF_ERROR(s.ReadBool("require_signatures", config.require_signatures));
    PILLAR_RETURN_IF_ERROR(s.ReadStrings("trusted_keys", config.trusted_keys));
    PILLAR_RETURN_IF_ERROR(s.ReadString("signing_key", config.repository_signing_key));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("reverify_interval_ms", config.reverify_interval_ms, 0, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("poll_ms", config.poll_ms, 0, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadString("default_alias", config.default_alias));
    if (!config.default_alias.empty() && !models::IsValidAliasName(config.default_alias)) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [repository] default_alias '", config.default_alias,
                 "': 1 to 64 of a-z, 0-9, '_', '-', starting with a letter"));
    }
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.repository_path = Resolve(base, config.repository_path);
    for (std::string& key : config.trusted_keys) key = Resolve(base, key);
    if (!config.repository_signing_key.empty()) {
      config.repository_signing_key = Resolve(base, config.repository_signing_key);
    }
  }
  {
    TomlSection s(root["state"].as_table(), "state", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("path", config.state_path));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("key_refresh_ms", config.key_refresh_ms, 10, 60'000));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("key_touch_ms", config.key_touch_ms, 10, 3'600'000));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.state_path = Resolve(base, config.state_path);
  }
  {
    TomlSection s(root["logging"].as_table(), "logging", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("access_log", config.access_log));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.access_log = Resolve(base, config.access_log);
  }
  {
    TomlSection s(root["runtime"].as_table(), "runtime", source);
    PILLAR_RETURN_IF_ERROR(s.ReadInt("torch_threads", config.torch_threads, 1, 256));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  {
    TomlSection s(root["policy"].as_table(), "policy", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("file", config.policy_path));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("reload_ms", config.policy_reload_ms, 0, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.policy_path = Resolve(base, config.policy_path);
  }
  {
    TomlSection s(root["limiter"].as_table(), "limiter", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("backend", config.limiter_backend));
    PILLAR_RETURN_IF_ERROR(s.ReadString("redis_host", config.redis_host));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("redis_port", config.redis_port, 1, 65535));
    PILLAR_RETURN_IF_ERROR(s.ReadString("redis_password_file", config.redis_password_file));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("redis_timeout_ms", config.redis_timeout_ms, 1, 60'000));
    PILLAR_RETURN_IF_ERROR(s.ReadString("redis_key_prefix", config.redis_key_prefix));
    PILLAR_RETURN_IF_ERROR(s.ReadString("on_redis_failure", config.on_redis_failure));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("instances", config.instances, 1, 10'000));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("lease_ttl_ms", config.lease_ttl_ms, 1000, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("quota_flush_ms", config.quota_flush_ms, 10, 3'600'000));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    if (config.limiter_backend != "embedded" && config.limiter_backend != "redis") {
      return absl::InvalidArgumentError(
          StrCat(source, ": [limiter] backend must be \"embedded\" or \"redis\""));
    }
    if (config.on_redis_failure != "closed" && config.on_redis_failure != "open") {
      return absl::InvalidArgumentError(
          StrCat(source, ": [limiter] on_redis_failure must be \"closed\" or \"open\""));
    }
    config.redis_password_file = Resolve(base, config.redis_password_file);
  }
  {
    TomlSection s(root["jwt"].as_table(), "jwt", source);
    Config::Jwt& jwt = config.jwt;
    PILLAR_RETURN_IF_ERROR(s.ReadString("jwks", jwt.jwks));
    PILLAR_RETURN_IF_ERROR(s.ReadString("issuer", jwt.issuer));
    PILLAR_RETURN_IF_ERROR(s.ReadStrings("audiences", jwt.audiences));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("clock_skew_s", jwt.clock_skew_s, 0, 3600));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("reload_ms", jwt.reload_ms, 0, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadString("subject_claim", jwt.subject_claim));
    PILLAR_RETURN_IF_ERROR(s.ReadString("tenant_claim", jwt.tenant_claim));
    PILLAR_RETURN_IF_ERROR(s.ReadString("roles_claim", jwt.roles_claim));
    std::map<std::string, std::vector<std::string>> attributes;
    PILLAR_RETURN_IF_ERROR(s.ReadStringTable("attributes", attributes));
    for (auto& [name, claims] : attributes) {
      if (claims.size() != 1) {
        return absl::InvalidArgumentError(
            StrCat(source, ": [jwt] attributes.", name, " must name one claim"));
      }
      jwt.attributes[name] = claims[0];
    }
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    if (!jwt.jwks.empty() && (jwt.issuer.empty() || jwt.audiences.empty())) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [jwt] needs issuer and audiences along with jwks"));
    }
    jwt.jwks = Resolve(base, jwt.jwks);
  }
  {
    TomlSection s(root["audit"].as_table(), "audit", source);
    Config::Audit& audit = config.audit;
    PILLAR_RETURN_IF_ERROR(s.ReadString("backend", audit.backend));
    PILLAR_RETURN_IF_ERROR(s.ReadString("file", audit.file));
    PILLAR_RETURN_IF_ERROR(s.ReadString("postgres", audit.postgres));
    PILLAR_RETURN_IF_ERROR(s.ReadString("instance", audit.instance));
    PILLAR_RETURN_IF_ERROR(s.ReadString("signing_key", audit.signing_key));
    PILLAR_RETURN_IF_ERROR(s.ReadStrings("public_keys", audit.public_keys));
    PILLAR_RETURN_IF_ERROR(
        s.ReadInt("checkpoint_interval_ms", audit.checkpoint_interval_ms, 10, kMaxMillis));
    PILLAR_RETURN_IF_ERROR(s.ReadString("fsync", audit.fsync));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("fsync_interval_ms", audit.fsync_interval_ms, 1, 60'000));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("queue_capacity", audit.queue_capacity, 16, 16'777'216));
    PILLAR_RETURN_IF_ERROR(s.ReadString("on_full", audit.on_full));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    auto one_of = [&](std::string_view key, const std::string& value,
                      std::initializer_list<std::string_view> allowed) -> absl::Status {
      std::string names;
      for (std::string_view a : allowed) {
        if (value == a) return absl::OkStatus();
        StrAppend(&names, names.empty() ? "" : ", ", a);
      }
      return absl::InvalidArgumentError(
          StrCat(source, ": [audit] ", key, " '", value, "' must be one of ", names));
    };
    PILLAR_RETURN_IF_ERROR(one_of("backend", audit.backend, {"file", "postgres", "off"}));
    PILLAR_RETURN_IF_ERROR(one_of("fsync", audit.fsync, {"batch", "interval", "off"}));
    PILLAR_RETURN_IF_ERROR(one_of("on_full", audit.on_full, {"drop", "refuse"}));
    if (audit.backend == "postgres" && audit.postgres.empty()) {
      return absl::InvalidArgumentError(
          StrCat(source, ": [audit] backend \"postgres\" needs a postgres connection string"));
    }
    audit.file = Resolve(base, audit.file);
    audit.signing_key = Resolve(base, audit.signing_key);
    for (std::string& key : audit.public_keys) key = Resolve(base, key);
  }
  if (const toml::array* clients = root["mtls_client"].as_array()) {
    for (const toml::node& node : *clients) {
      TomlSection s(node.as_table(), "mtls_client", source);
      std::string identity;
      Config::CertificateClient client;
      PILLAR_RETURN_IF_ERROR(s.ReadString("identity", identity));
      PILLAR_RETURN_IF_ERROR(s.ReadString("tenant", client.tenant));
      PILLAR_RETURN_IF_ERROR(s.ReadStrings("roles", client.roles));
      PILLAR_RETURN_IF_ERROR(s.ReadStringTable("attributes", client.attributes));
      PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
      if (identity.empty()) {
        return absl::InvalidArgumentError(StrCat(source, ": [[mtls_client]] needs identity"));
      }
      if (!config.certificate_clients.emplace(identity, std::move(client)).second) {
        return absl::InvalidArgumentError(
            StrCat(source, ": [[mtls_client]] '", identity, "' is listed twice"));
      }
    }
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
