#include "http/listener_config.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::http {
ListenerOptions ListenerNamed(std::string name, uint16_t port) {
  ListenerOptions options;
  options.name = std::move(name);
  options.port = port;
  return options;
}

[[nodiscard]] absl::Status ReadListenerSection(const toml::table& root, std::string_view source,
                                               const std::string& base, ListenerOptions& listener) {
  using Options = ListenerOptions;
  TomlSection s(root[listener.name].as_table(), listener.name, source);
  PILLAR_RETURN_IF_ERROR(s.ReadString("address", listener.address));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("port", listener.port, 0, 65535));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("tls_certificate", listener.tls_certificate, base));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("tls_private_key", listener.tls_private_key, base));
  PILLAR_RETURN_IF_ERROR(s.ReadBool("allow_plaintext", listener.allow_plaintext));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("client_ca", listener.client_ca, base));
  PILLAR_RETURN_IF_ERROR(s.ReadPath("client_crl", listener.client_crl, base));
  PILLAR_RETURN_IF_ERROR(s.ReadEnum("client_certificates", listener.client_certificates,
                                    {{"none", Options::ClientCertificates::kNone},
                                     {"optional", Options::ClientCertificates::kOptional},
                                     {"require", Options::ClientCertificates::kRequire}}));
  PILLAR_RETURN_IF_ERROR(s.ReadEnum("client_identity", listener.client_identity,
                                    {{"subject_cn", Options::ClientIdentity::kSubjectCn},
                                     {"san_uri", Options::ClientIdentity::kSanUri},
                                     {"san_dns", Options::ClientIdentity::kSanDns}}));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("tls_reload_ms", listener.tls_reload, 0, 86'400'000));
  if (listener.tls_certificate.empty() != listener.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [", listener.name, "] needs both tls_certificate and tls_private_key"));
  }
  if (!listener.client_ca.empty() &&
      listener.client_certificates == Options::ClientCertificates::kNone) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [", listener.name,
               "] has client_ca but asks clients for no certificate: set client_certificates = "
               "\"optional\" or \"require\", or remove client_ca"));
  }
  if (!listener.client_crl.empty() && listener.client_ca.empty()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [", listener.name,
               "] has client_crl without client_ca: the CRLs are checked "
               "against the CAs client_ca trusts"));
  }
  return s.CheckNoUnknownKeys();
}

[[nodiscard]] absl::Status ReadLimitsSection(const toml::table& root, std::string_view source,
                                             Limits& limits) {
  TomlSection s(root["limits"].as_table(), "limits", source);
  PILLAR_RETURN_IF_ERROR(s.ReadInt("header_limit_bytes", limits.header_limit_bytes, 512, 1 << 20));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("header_fields_limit", limits.header_fields_limit, 1, 10'000));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("body_limit_bytes", limits.body_limit_bytes, 1, int64_t(1) << 32));
  PILLAR_RETURN_IF_ERROR(
      s.ReadInt("inflight_bytes_limit", limits.inflight_bytes_limit, 1, int64_t(1) << 40));
  // Below this, a request of the largest size allowed could never be served.
  if (limits.inflight_bytes_limit < limits.header_limit_bytes + limits.body_limit_bytes) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [limits] inflight_bytes_limit (", limits.inflight_bytes_limit,
               ") must be at least header_limit_bytes + body_limit_bytes (",
               limits.header_limit_bytes + limits.body_limit_bytes, ")"));
  }
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("request_timeout_ms", limits.request_timeout, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("body_min_bytes_per_second", limits.body_min_bytes_per_second, 0,
                                   int64_t(1) << 32));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("body_min_rate_grace_ms", limits.body_min_rate_grace, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadMillis("idle_timeout_ms", limits.idle_timeout, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("write_timeout_ms", limits.write_timeout, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(
      s.ReadMillis("tls_handshake_timeout_ms", limits.tls_handshake_timeout, 1, kMaxConfigMillis));
  PILLAR_RETURN_IF_ERROR(s.ReadInt("max_connections", limits.max_connections, 1, 1'000'000));
  return s.CheckNoUnknownKeys();
}

}  // namespace pillar::http
