// Internal to src/http: what a TLS connection knows of its client's certificate, kept current for
// each request (session.h). Read once after the handshake, full or resumed; checked again when the
// listener's client CAs or CRLs changed since (a certificate revoked since names nobody); named on
// a request only until the end of the chain it was verified with.
//
//   TlsClient client;
//   client.Handshaken(ssl, listener, now_ns);              // after the handshake
//   bool same = client.Check(ssl, listener, core, remote, tls, now_ns);   // before each request
//   client.Name(ssl, listener, request, now_ns);            // sets the request's identity fields
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "http/intermediate_pool.h"
#include "http/message.h"
#include "http/peer_identity.h"
#include "http/server_state.h"
#include "http/tls_context.h"

namespace pillar::http::internal {

class TlsClient {
 public:
  // After the connection's handshake: its client, as PeerIdentity reads it. The intermediates of
  // a chain a full handshake verified are remembered by the listener (a client resumed later
  // holds only its own certificate: IntermediatePool).
  void Handshaken(SSL* ssl, Listener& listener, int64_t now_ns) {
    PeerCertificate peer = PeerIdentity(ssl, listener.options.client_identity);
    if (peer.verified && SSL_session_reused(ssl) != 1) {
      listener.tls->intermediates().Remember(SSL_get0_verified_chain(ssl));
    }
    identity_ = std::move(peer.identity);
    verified_ = peer.verified;
    valid_until_ns_ = now_ns + peer.valid_for_ns;
  }

  // Before a request on a connection made under `tls` (the listener's files then): false when the
  // listener's TLS files changed since, and then, when what clients are verified against changed
  // (a new CRL, a new CA bundle), the client's chain is checked again against the current files
  // before the request is read as its (found by review helper-64: the connection then closes
  // after its answer, so that no client keeps the old context and its CRLs alive).
  bool Check(SSL* ssl, Listener& listener, Core& core, std::string_view remote,
             ListenerTls::Current& tls, int64_t now_ns) {
    if (listener.tls->generation() == tls.generation) return true;
    if (verified_ && listener.tls->verify_generation() != tls.verify_generation) {
      VerifyAgain(ssl, listener, core, remote, tls, now_ns);
    }
    return false;
  }

  // The most a job keeps of its client's chain (a leaf and two intermediates take 3 to 6 KiB).
  static constexpr size_t kMaxKeptChain = 32 * 1024;

  // The request's client: its identity while the certificate's chain has not ended (a connection
  // kept alive past it names nobody from then on), whether a verified certificate names nobody,
  // and, for a request that will run as a job, the chain the job checks again when it runs.
  void Name(SSL* ssl, const Listener& listener, Request& request, int64_t now_ns) const {
    request.peer_identity = now_ns < valid_until_ns_ ? identity_ : std::string();
    request.peer_certificate.clear();
    request.peer_unnamed = verified_ && request.peer_identity.empty();
    if (request.respond_async && !request.peer_identity.empty()) {
      const ListenerTls::Current current = listener.tls->Get();
      const X509Stack untrusted = listener.tls->intermediates().With(SSL_get_peer_cert_chain(ssl));
      request.peer_certificate =
          VerifiedChainDer(ssl, current.context->native_handle(), untrusted.get(), kMaxKeptChain);
    }
  }

  // Whether Name at `now_ns` would name the client as it did at `named_ns`, the listener's
  // files unchanged since (Check tells).
  bool NamesAlike(int64_t named_ns, int64_t now_ns) const {
    return (named_ns < valid_until_ns_) == (now_ns < valid_until_ns_);
  }

 private:
  // The client checked against the listener's current CAs and CRLs; one that no longer verifies
  // names nobody.
  void VerifyAgain(SSL* ssl, Listener& listener, Core& core, std::string_view remote,
                   ListenerTls::Current& tls, int64_t now_ns) {
    const ListenerTls::Current current = listener.tls->Get();
    const X509Stack untrusted = listener.tls->intermediates().With(SSL_get_peer_cert_chain(ssl));
    PeerCertificate peer = ReverifyPeer(ssl, current.context->native_handle(), untrusted.get(),
                                        listener.options.client_identity);
    tls.generation = current.generation;
    tls.verify_generation = current.verify_generation;
    listener.Rechecked(core, remote, peer.verified, peer.failure, now_ns);
    if (!peer.verified) {
      identity_.clear();
      return;
    }
    identity_ = std::move(peer.identity);
    valid_until_ns_ = now_ns + peer.valid_for_ns;
  }

  std::string identity_;        // from the client certificate, fixed for the connection
  int64_t valid_until_ns_ = 0;  // monotonic: the end of the chain it was verified with
  bool verified_ = false;       // a certificate came and verified (named or not)
};

}  // namespace pillar::http::internal
