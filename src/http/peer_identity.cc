#include "http/peer_identity.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <optional>

namespace pillar::http {
namespace {

// The certificate's only SAN of `type`; empty when it has none or more than one.
std::string OnlySan(X509* cert, int type) {
  std::string out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  int found = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != type || ++found > 1) continue;
    const ASN1_IA5STRING* value =
        type == GEN_URI ? name->d.uniformResourceIdentifier : name->d.dNSName;
    out.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
               size_t(ASN1_STRING_length(value)));
  }
  GENERAL_NAMES_free(names);
  // Two names of the kind that names the client: which one is meant is the reader's guess (a
  // SPIFFE certificate has exactly one URI), so neither is taken.
  if (found > 1) out.clear();
  return out;
}

std::string CommonName(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  // Two common names: tools disagree on which one counts (found by review helper-59).
  if (index < 0 || X509_NAME_get_index_by_NID(subject, NID_commonName, index) >= 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return {};
  std::string out(reinterpret_cast<char*>(utf8), size_t(length));
  OPENSSL_free(utf8);
  return out;
}

// Seconds from now to the certificate's notAfter (negative once past it); nullopt when it is not
// valid yet or its dates do not parse.
std::optional<int64_t> SecondsLeft(X509* cert) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) return std::nullopt;
  int days = 0, seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert)) != 1) {
    return std::nullopt;
  }
  return int64_t(days) * 86400 + seconds;
}

}  // namespace

PeerCertificate PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  // With verify_peer, a certificate that failed verification ends the handshake; checking the
  // result again keeps that true even if the verify mode changes.
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  // The handshake checked the dates, but a resumed session does not verify again (found by
  // review helper-59: a certificate past its end kept its identity through resumptions).
  const std::optional<int64_t> left = SecondsLeft(cert);
  if (!left || *left <= 0) return {};
  std::string identity;
  switch (which) {
    case ListenerOptions::ClientIdentity::kSubjectCn:
      identity = CommonName(cert);
      break;
    case ListenerOptions::ClientIdentity::kSanUri:
      identity = OnlySan(cert, GEN_URI);
      break;
    case ListenerOptions::ClientIdentity::kSanDns:
      identity = OnlySan(cert, GEN_DNS);
      break;
  }
  // Identities become principal ids and log fields: refuse control characters outright.
  for (char c : identity) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return {};
  }
  if (identity.empty()) return {};
  return {std::move(identity), *left * 1'000'000'000};
}

}  // namespace pillar::http
