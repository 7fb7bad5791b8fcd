#include "http/peer_identity.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <ctime>
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

// Seconds from now to the earliest notAfter of the chain `ssl`'s client was verified with, its
// leaf, intermediates and root: from the verified chain after a full handshake, from what the
// session carries after a resumption (KeepChainEndInSessions); nullopt when neither is known.
std::optional<int64_t> ChainSecondsLeft(SSL* ssl) {
  SSL_SESSION* session = SSL_get_session(ssl);
  if (SSL_session_reused(ssl) == 1) {
    void* data = nullptr;
    size_t size = 0;
    int64_t end = 0;
    if (session == nullptr || SSL_SESSION_get0_ticket_appdata(session, &data, &size) != 1 ||
        size != sizeof end) {
      return std::nullopt;
    }
    std::memcpy(&end, data, sizeof end);
    return end - int64_t(std::time(nullptr));
  }
  STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl);
  if (chain == nullptr) return std::nullopt;
  std::optional<int64_t> earliest;
  for (int i = 0; i < sk_X509_num(chain); ++i) {
    int days = 0, seconds = 0;
    if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(sk_X509_value(chain, i))) !=
        1) {
      return std::nullopt;
    }
    const int64_t left = int64_t(days) * 86400 + seconds;
    earliest = earliest ? std::min(*earliest, left) : left;
  }
  return earliest;
}

// The chain's end as the session keeps it (ticket application data, which tickets carry):
// written once, after the full handshake that verified the chain.
void NoteChainEnd(SSL* ssl) {
  SSL_SESSION* session = SSL_get_session(ssl);
  if (session == nullptr || SSL_session_reused(ssl) == 1) return;
  void* data = nullptr;
  size_t size = 0;
  if (SSL_SESSION_get0_ticket_appdata(session, &data, &size) == 1 && size == sizeof(int64_t)) {
    return;
  }
  const std::optional<int64_t> left = ChainSecondsLeft(ssl);
  if (!left) return;
  const int64_t end = int64_t(std::time(nullptr)) + *left;
  SSL_SESSION_set1_ticket_appdata(session, &end, sizeof end);
}

int OnTicketMade(SSL* ssl, void* /*arg*/) {
  NoteChainEnd(ssl);
  return 1;
}

// A ticket whose chain has ended since is not resumed: the client makes a full handshake, whose
// verification refuses the chain. Other statuses as OpenSSL decides them without a callback.
SSL_TICKET_RETURN OnTicketRead(SSL* /*ssl*/, SSL_SESSION* session,
                               const unsigned char* /*key_name*/, size_t /*key_name_size*/,
                               SSL_TICKET_STATUS status, void* /*arg*/) {
  switch (status) {
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW: {
      void* data = nullptr;
      size_t size = 0;
      int64_t end = 0;
      if (SSL_SESSION_get0_ticket_appdata(session, &data, &size) == 1 && size == sizeof end) {
        std::memcpy(&end, data, sizeof end);
        if (end <= int64_t(std::time(nullptr))) return SSL_TICKET_RETURN_IGNORE_RENEW;
      }
      return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW;
    }
    case SSL_TICKET_EMPTY:
    case SSL_TICKET_NO_DECRYPT:
      return SSL_TICKET_RETURN_IGNORE_RENEW;
    case SSL_TICKET_NONE:
      return SSL_TICKET_RETURN_IGNORE;
    default:
      return SSL_TICKET_RETURN_ABORT;
  }
}

// Past this, a validity is "no end" (RFC 5280's 99991231235959Z): nanoseconds from now would
// overflow (found by review helper-60: certificates valid past 2318 named nobody).
constexpr int64_t kLongestValiditySeconds = int64_t(100) * 366 * 86400;

}  // namespace

bool KeepChainEndInSessions(SSL_CTX* context) {
  return SSL_CTX_set_session_ticket_cb(context, OnTicketMade, OnTicketRead, nullptr) == 1;
}

PeerCertificate PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  // With verify_peer, a certificate that failed verification ends the handshake; checking the
  // result again keeps that true even if the verify mode changes.
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  PeerCertificate unnamed;
  unnamed.verified = true;
  // The handshake checked the dates, but a resumed session does not verify again (found by
  // review helper-59: a certificate past its end kept its identity through resumptions).
  // Nor are its intermediates' and root's dates (found by review helper-60): their earliest end,
  // kept in the session from the full handshake, bounds it too.
  NoteChainEnd(ssl);  // for a resumption by session id, which no ticket carried
  std::optional<int64_t> left = SecondsLeft(cert);
  if (const std::optional<int64_t> chain = ChainSecondsLeft(ssl); left && chain) {
    left = std::min(*left, *chain);
  }
  if (!left || *left <= 0) return unnamed;
  left = std::min(*left, kLongestValiditySeconds);
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
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return unnamed;
  }
  if (identity.empty()) return unnamed;
  return {std::move(identity), *left * 1'000'000'000, true};
}

}  // namespace pillar::http
