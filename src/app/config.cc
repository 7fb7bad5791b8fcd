#include "app/config.h"

#include <filesystem>
#include <set>
#include <string>

#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "models/version_policy.h"

namespace pillar::app {
namespace {

constexpr int64_t kMaxMillis = 24LL * 3600 * 1000;  // a day: beyond it, a typo

absl::Status ReadMillis(TomlSection& s, std::string_view key, absl::Duration& out) {
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

absl::Status ReadListener(const toml::table& root, std::string_view source,
                          http::ListenerOptions& listener, const std::string& base) {
  TomlSection s(root[listener.name].as_table(), listener.name, source);
  PILLAR_RETURN_IF_ERROR(s.ReadString("address", listener.address));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("port", listener.port, 0, 65535));
  PILLAR_RETURN_IF_ERROR(s.ReadString("tls_certificate", listener.tls_certificate));
  PILLAR_RETURN_IF_ERROR(s.ReadString("tls_private_key", listener.tls_private_key));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("allow_plaintext", listener.allow_plaintext));
  listener.tls_certificate = Resolve(base, listener.tls_certificate);
  listener.tls_private_key = Resolve(base, listener.tls_private_key);
  if (listener.tls_certificate.empty() != listener.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [", listener.name, "] needs both tls_certificate and tls_private_key"));
  }
  return s.CheckNoUnknownKeys();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view text, std::string_view source,
                                   const std::string& base) {
  PILLAR_ASSIGN_OR_RETURN(const toml::table root, ParseToml(text, source));
  static const std::set<std::string> kSections = {"server",     "data",  "admin",   "limits",
                                                  "repository", "state", "logging", "runtime"};
  for (const auto& [key, value] : root) {
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
        s.ReadInt("body_limit_bytes", config.limits.body_limit_bytes, 1, int64_t(1) << 32));
    PILLAR_RETURN_IF_ERROR(ReadMillis(s, "request_timeout_ms", config.limits.request_timeout));
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
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.repository_path = Resolve(base, config.repository_path);
  }
  {
    TomlSection s(root["state"].as_table(), "state", source);
    PILLAR_RETURN_IF_ERROR(s.ReadString("path", config.state_path));
    PILLAR_RETURN_IF_ERROR(s.ReadInt("key_refresh_ms", config.key_refresh_ms, 10, 60'000));
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
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  if (path.empty()) return Config{};
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, 1 << 20));
  std::string base = std::filesystem::absolute(path).parent_path().string();
  return ParseConfig(text, path, base);
}

}  // namespace pillar::app
