#include "http/peer_identity.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace pillar::http {
namespace {

std::string FirstSan(X509* cert, int type) {
  std::string out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && out.empty(); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != type) continue;
    const ASN1_IA5STRING* value =
        type == GEN_URI ? name->d.uniformResourceIdentifier : name->d.dNSName;
    out.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
               size_t(ASN1_STRING_length(value)));
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::string CommonName(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return {};
  std::string out(reinterpret_cast<char*>(utf8), size_t(length));
  OPENSSL_free(utf8);
  return out;
}

}  // namespace

std::string PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  // With verify_peer, a certificate that failed verification ends the handshake; checking the
  // result again keeps that true even if the verify mode changes.
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  std::string identity;
  switch (which) {
    case ListenerOptions::ClientIdentity::kSubjectCn:
      identity = CommonName(cert);
      break;
    case ListenerOptions::ClientIdentity::kSanUri:
      identity = FirstSan(cert, GEN_URI);
      break;
    case ListenerOptions::ClientIdentity::kSanDns:
      identity = FirstSan(cert, GEN_DNS);
      break;
  }
  // Identities become principal ids and log fields: refuse control characters outright.
  for (char c : identity) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return {};
  }
  return identity;
}

}  // namespace pillar::http
