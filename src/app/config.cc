#include "app/config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"
#include "models/version_policy.h"

namespace pillar::app {
namespace {

// Reads one table, remembering which keys were consumed so that leftovers can be reported.
class Section {
 public:
  Section(const toml::table* table, std::string name, std::string_view source)
      : table_(table), name_(std::move(name)), source_(source) {}

  template <typename T>
  absl::Status Read(std::string_view key, T& out) {
    seen_.insert(std::string(key));
    if (table_ == nullptr) return absl::OkStatus();
    const toml::node* node = table_->get(key);
    if (node == nullptr) return absl::OkStatus();
    if constexpr (std::is_same_v<T, bool>) {
      if (!node->is_boolean()) return TypeError(key, "a boolean");
      out = node->as_boolean()->get();
    } else if constexpr (std::is_integral_v<T>) {
      if (!node->is_integer()) return TypeError(key, "an integer");
      int64_t v = node->as_integer()->get();
      if (v < 0 || static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))
        return TypeError(key, "a non-negative integer in range");
      out = static_cast<T>(v);
    } else {
      if (!node->is_string()) return TypeError(key, "a string");
      out = node->as_string()->get();
    }
    return absl::OkStatus();
  }

  // Marks a key read elsewhere (a sub-table) as known.
  void Allow(std::string_view key) { seen_.insert(std::string(key)); }

  absl::Status Duration(std::string_view key, absl::Duration& out) {
    int64_t ms = absl::ToInt64Milliseconds(out);
    PILLAR_RETURN_IF_ERROR(Read(key, ms));
    out = absl::Milliseconds(ms);
    return absl::OkStatus();
  }

  absl::Status CheckNoUnknownKeys() const {
    if (table_ == nullptr) return absl::OkStatus();
    for (const auto& [key, value] : *table_) {
      if (!seen_.contains(std::string(key.str()))) {
        return absl::InvalidArgumentError(
            StrCat(source_, ": unknown key '", key.str(), "' in [", name_, "]"));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status TypeError(std::string_view key, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(source_, ": [", name_, "] ", key, " must be ", what));
  }

  const toml::table* table_;
  std::string name_;
  std::string_view source_;
  std::set<std::string> seen_;
};

std::string Resolve(const std::string& base, const std::string& path) {
  if (path.empty() || path == "-" || base.empty() || std::filesystem::path(path).is_absolute())
    return path;
  return (std::filesystem::path(base) / path).lexically_normal().string();
}

absl::Status ReadListener(const toml::table& root, std::string_view source,
                          http::ListenerOptions& listener, const std::string& base) {
  Section s(root[listener.name].as_table(), listener.name, source);
  PILLAR_RETURN_IF_ERROR(s.Read("address", listener.address));
  PILLAR_RETURN_IF_ERROR(s.Read("port", listener.port));
  PILLAR_RETURN_IF_ERROR(s.Read("tls_certificate", listener.tls_certificate));
  PILLAR_RETURN_IF_ERROR(s.Read("tls_private_key", listener.tls_private_key));
  PILLAR_RETURN_IF_ERROR(s.Read("allow_plaintext", listener.allow_plaintext));
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
    Section s(root["server"].as_table(), "server", source);
    PILLAR_RETURN_IF_ERROR(s.Read("threads", config.threads));
    PILLAR_RETURN_IF_ERROR(s.Read("drain_timeout_ms", config.drain_timeout_ms));
    PILLAR_RETURN_IF_ERROR(s.Read("strict_readiness", config.strict_readiness));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  PILLAR_RETURN_IF_ERROR(ReadListener(root, source, config.data, base));
  PILLAR_RETURN_IF_ERROR(ReadListener(root, source, config.admin, base));
  {
    Section s(root["limits"].as_table(), "limits", source);
    PILLAR_RETURN_IF_ERROR(s.Read("header_limit_bytes", config.limits.header_limit_bytes));
    PILLAR_RETURN_IF_ERROR(s.Read("body_limit_bytes", config.limits.body_limit_bytes));
    PILLAR_RETURN_IF_ERROR(s.Duration("request_timeout_ms", config.limits.request_timeout));
    PILLAR_RETURN_IF_ERROR(s.Duration("idle_timeout_ms", config.limits.idle_timeout));
    PILLAR_RETURN_IF_ERROR(s.Duration("write_timeout_ms", config.limits.write_timeout));
    PILLAR_RETURN_IF_ERROR(
        s.Duration("tls_handshake_timeout_ms", config.limits.tls_handshake_timeout));
    PILLAR_RETURN_IF_ERROR(s.Read("max_connections", config.limits.max_connections));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  {
    Section s(root["repository"].as_table(), "repository", source);
    PILLAR_RETURN_IF_ERROR(s.Read("path", config.repository_path));
    PILLAR_RETURN_IF_ERROR(s.Read("version_policy", config.version_policy));
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
    Section s(root["state"].as_table(), "state", source);
    PILLAR_RETURN_IF_ERROR(s.Read("path", config.state_path));
    PILLAR_RETURN_IF_ERROR(s.Read("key_refresh_ms", config.key_refresh_ms));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.state_path = Resolve(base, config.state_path);
  }
  {
    Section s(root["logging"].as_table(), "logging", source);
    PILLAR_RETURN_IF_ERROR(s.Read("access_log", config.access_log));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
    config.access_log = Resolve(base, config.access_log);
  }
  {
    Section s(root["runtime"].as_table(), "runtime", source);
    PILLAR_RETURN_IF_ERROR(s.Read("torch_threads", config.torch_threads));
    PILLAR_RETURN_IF_ERROR(s.CheckNoUnknownKeys());
  }
  if (config.limits.body_limit_bytes == 0 || config.limits.header_limit_bytes < 512) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [limits] are too small to serve any request"));
  }
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  if (path.empty()) return Config{};
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read config file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string base = std::filesystem::absolute(path).parent_path().string();
  return ParseConfig(text.str(), path, base);
}

}  // namespace pillar::app
