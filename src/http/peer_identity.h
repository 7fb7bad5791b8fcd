// The identity of a TLS client that presented a certificate the listener verified: its
// subject common name, its URI SAN (SPIFFE IDs live there) or its DNS SAN, when it has exactly
// one of the kind the listener names clients by.
#pragma once

#include <cstdint>
#include <string>

#include "http/server.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
struct stack_st_X509;
typedef struct x509_st X509;

namespace pillar::http {

struct PeerCertificate {
  // Empty when the client sent no certificate, the chosen name is absent or given more than once,
  // or the certificate is outside its validity dates now.
  std::string identity;
  // How long from now the certificate stays valid (its notAfter), when `identity` is set: a
  // resumed session or a kept-alive connection names nobody past it.
  int64_t valid_for_ns = 0;
  // The client sent a certificate that verified (identity may still be empty).
  bool verified = false;
  // Why it did not verify (ReverifyPeer), as OpenSSL says it ("certificate revoked").
  std::string failure;
};

// Has the sessions of a listener's context carry the end of the chain their client was verified
// with (the earliest notAfter of its leaf, intermediates and root) in their tickets, and resumes
// none past it: a resumption verifies nothing again. False when OpenSSL refuses the callbacks.
bool KeepChainEndInSessions(SSL_CTX* context);

// Read once per connection, after its handshake, resumed or not: a resumed session carries the
// certificate it was verified with, whose dates are checked again here.
PeerCertificate PeerIdentity(SSL* ssl, ListenerOptions::ClientIdentity which);

// The client of `ssl`, verified at its handshake under another context of the listener, checked
// again against `current`'s CAs and CRLs as a handshake would check it: its certificate, with
// `untrusted` (may be null) as the certificates its chain may be built from besides the CA
// bundle: the chain it sent when the connection's handshake was a full one, and the
// intermediates the listener has seen verified (a resumed session keeps only the client's own
// certificate: IntermediatePool). Named as PeerIdentity names it, until the end of the chain now
// verified and of `current`'s CRLs.
PeerCertificate ReverifyPeer(SSL* ssl, SSL_CTX* current, stack_st_X509* untrusted,
                             ListenerOptions::ClientIdentity which);
// ReverifyPeer for a certificate kept apart from its connection (a job's: jobs/).
PeerCertificate ReverifyCertificate(X509* cert, SSL_CTX* current, stack_st_X509* untrusted,
                                    ListenerOptions::ClientIdentity which);

// The chain the client of `ssl` verifies with now under `current` (with `untrusted` as
// ReverifyPeer takes it), its certificate first, without the trust anchor, each in DER, one after
// the other: what a job keeps to check its client again when it runs. Only certificates of the
// verified chain, never others the client sent (found by review helper-69: a client could store
// 100 KiB of them with each job), nor the resumed session's lack of them (a chain built with the
// listener's intermediates, not lost at a restart). Empty when it does not verify, or when it
// takes more than `max_bytes`.
std::string VerifiedChainDer(SSL* ssl, SSL_CTX* current, stack_st_X509* untrusted,
                             size_t max_bytes);

// Why a handshake failed, for the listener's log: `error` ("certificate verify failed"), and
// when the client's certificate was what failed, why ("certificate revoked", "CRL has expired").
std::string HandshakeFailure(SSL* ssl, std::string_view error);

}  // namespace pillar::http
