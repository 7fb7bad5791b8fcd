#include "http/peer_identity.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>

#include "common/strings.h"
#include "common/tls_keys.h"
#include "http/revocation.h"

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

int64_t Now() { return int64_t(std::time(nullptr)); }

// The earliest notAfter of `chain` and nextUpdate of the CRLs `ctx` checks; nullopt when a
// certificate's end cannot be read.
std::optional<int64_t> EarliestEnd(STACK_OF(X509) * chain, SSL_CTX* ctx) {
  std::optional<int64_t> earliest = RevocationEnd(ctx);
  for (int i = 0; i < sk_X509_num(chain); ++i) {
    const std::optional<int64_t> end = UnixSeconds(X509_get0_notAfter(sk_X509_value(chain, i)));
    if (!end) return std::nullopt;
    earliest = std::min(earliest.value_or(*end), *end);
  }
  return earliest;
}

// The end of the chain a session's client was verified with, as the session keeps it (its
// ticket's application data, which tickets carry); nullopt when it keeps none.
std::optional<int64_t> KeptChainEnd(SSL_SESSION* session) {
  void* data = nullptr;
  size_t size = 0;
  int64_t end = 0;
  if (session == nullptr || SSL_SESSION_get0_ticket_appdata(session, &data, &size) != 1 ||
      size != sizeof end) {
    return std::nullopt;
  }
  std::memcpy(&end, data, sizeof end);
  return end;
}

// The earliest notAfter (unix seconds) of the chain `ssl`'s client was verified with, its leaf,
// intermediates and root, and of the revocation lists it was checked against: kept in the
// session after a resumption (a resumption verifies nothing again); after a full handshake,
// read from the verified chain and kept in the session for the resumptions to come (by ticket,
// or by session id). Nullopt when unknown.
std::optional<int64_t> ChainEnd(SSL* ssl) {
  SSL_SESSION* session = SSL_get_session(ssl);
  if (SSL_session_reused(ssl) == 1) return KeptChainEnd(session);
  if (std::optional<int64_t> kept = KeptChainEnd(session)) return kept;
  STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl);
  if (chain == nullptr) return std::nullopt;
  const std::optional<int64_t> earliest = EarliestEnd(chain, SSL_get_SSL_CTX(ssl));
  if (earliest && session != nullptr) {
    SSL_SESSION_set1_ticket_appdata(session, &*earliest, sizeof *earliest);
  }
  return earliest;
}

int OnTicketMade(SSL* ssl, void* /*arg*/) {
  ChainEnd(ssl);  // kept in the session, which the ticket carries
  return 1;
}

// A ticket whose chain has ended since is not resumed: the client makes a full handshake, whose
// verification refuses the chain. Other statuses as OpenSSL decides them without a callback.
SSL_TICKET_RETURN OnTicketRead(SSL* /*ssl*/, SSL_SESSION* session,
                               const unsigned char* /*key_name*/, size_t /*key_name_size*/,
                               SSL_TICKET_STATUS status, void* /*arg*/) {
  switch (status) {
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW:
      if (const std::optional<int64_t> end = KeptChainEnd(session); end && *end <= Now()) {
        return SSL_TICKET_RETURN_IGNORE_RENEW;
      }
      return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW;
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

namespace {

// `cert`, verified, named by `which`, until the earliest of its own end and `chain_end` (the end
// of its chain and of the CRLs it was checked against; nullopt when unknown).
PeerCertificate Named(X509* cert, std::optional<int64_t> chain_end,
                      ListenerOptions::ClientIdentity which) {
  PeerCertificate unnamed;
  unnamed.verified = true;
  // The handshake checked the dates, but a resumed session does not verify again (found by
  // review helper-59: a certificate past its end kept its identity through resumptions), nor
  // are its intermediates' and root's dates (found by review helper-60): the leaf's start, and
  // the earliest end of the whole chain, bound the identity.
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) return unnamed;
  std::optional<int64_t> end = UnixSeconds(X509_get0_notAfter(cert));
  if (end && chain_end) end = std::min(*end, *chain_end);
  if (!end || *end <= Now()) return unnamed;
  const int64_t left = std::min(*end - Now(), kLongestValiditySeconds);
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
  return {std::move(identity), left * 1'000'000'000, true, {}};
}

}  // namespace

PeerCertificate PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  // With verify_peer, a certificate that failed verification ends the handshake; checking the
  // result again keeps that true even if the verify mode changes.
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  return Named(cert, ChainEnd(ssl), which);
}

PeerCertificate ReverifyPeer(SSL* ssl, SSL_CTX* current, STACK_OF(X509) * untrusted,
                             ListenerOptions::ClientIdentity which) {
  return ReverifyCertificate(SSL_get0_peer_certificate(ssl), current, untrusted, which);
}

namespace {

bool AppendDer(X509* cert, std::string& out) {
  const int size = i2d_X509(cert, nullptr);
  if (size <= 0) return false;
  const size_t at = out.size();
  out.resize(at + size_t(size));
  unsigned char* to = reinterpret_cast<unsigned char*>(out.data() + at);
  return i2d_X509(cert, &to) == size;
}

using StoreCheck = std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)>;

// `cert` verified as OpenSSL verifies a client in a handshake (ssl_verify_cert_chain) against
// `current`: the store's parameters (the CRL checks), the security level's key sizes and digests
// (found by review helper-64), the TLS client purpose, then the context's own parameters. Null,
// with `failure` said, when it does not verify.
StoreCheck Verify(X509* cert, SSL_CTX* current, STACK_OF(X509) * untrusted, std::string& failure) {
  StoreCheck check(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (cert == nullptr) {
    failure = "no certificate";
    return StoreCheck(nullptr, X509_STORE_CTX_free);
  }
  if (check == nullptr ||
      X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(current), cert, untrusted) != 1) {
    failure = "cannot set up the certificate check";
    return StoreCheck(nullptr, X509_STORE_CTX_free);
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(check.get());
  X509_VERIFY_PARAM_set_auth_level(param, SSL_CTX_get_security_level(current));
  if (X509_STORE_CTX_set_default(check.get(), "ssl_client") != 1 ||
      X509_VERIFY_PARAM_set1(param, SSL_CTX_get0_param(current)) != 1) {
    failure = "cannot set up the certificate check";
    return StoreCheck(nullptr, X509_STORE_CTX_free);
  }
  if (X509_verify_cert(check.get()) != 1) {
    failure = X509_verify_cert_error_string(X509_STORE_CTX_get_error(check.get()));
    return StoreCheck(nullptr, X509_STORE_CTX_free);
  }
  return check;
}

}  // namespace

std::string VerifiedChainDer(SSL* ssl, SSL_CTX* current, STACK_OF(X509) * untrusted,
                             size_t max_bytes) {
  std::string failure;
  const StoreCheck check = Verify(SSL_get0_peer_certificate(ssl), current, untrusted, failure);
  if (check == nullptr) return std::string();
  STACK_OF(X509)* chain = X509_STORE_CTX_get0_chain(check.get());
  // Without its last certificate, the trust anchor, which must still be in client_ca when the
  // chain is checked again; a client certificate that is its own anchor is kept.
  const int kept = std::max(1, sk_X509_num(chain) - 1);
  std::string der;
  for (int i = 0; i < kept; ++i) {
    if (!AppendDer(sk_X509_value(chain, i), der) || der.size() > max_bytes) return std::string();
  }
  return der;
}

PeerCertificate ReverifyCertificate(X509* cert, SSL_CTX* current, STACK_OF(X509) * untrusted,
                                    ListenerOptions::ClientIdentity which) {
  PeerCertificate failed;
  const StoreCheck check = Verify(cert, current, untrusted, failed.failure);
  if (check == nullptr) return failed;
  return Named(cert, EarliestEnd(X509_STORE_CTX_get0_chain(check.get()), current), which);
}

std::string HandshakeFailure(SSL* ssl, std::string_view error) {
  const long verified = SSL_get_verify_result(ssl);
  if (verified == X509_V_OK) return std::string(error);
  return StrCat(error, ": ", X509_verify_cert_error_string(verified));
}

}  // namespace pillar::http
