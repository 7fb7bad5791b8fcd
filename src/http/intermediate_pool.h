// Internal to src/http: the intermediate CA certificates a TLS listener's clients sent with
// chains that verified, kept so that a client can be checked again when the listener's client
// CAs or CRLs change. A connection resumed from a ticket holds only its client's own
// certificate (tickets carry the leaf, not the chain), so without them a client whose
// intermediates are not in client_ca could not be verified again, and a request that its
// handshake had authenticated would be read as nobody's.
//
//   pool.Remember(SSL_get0_verified_chain(ssl));                  // after a full handshake
//   X509_STORE_CTX_init(check, store, leaf, pool.With(SSL_get_peer_cert_chain(ssl)).get());
//
// The certificates are candidates only, as those a client sends are: a chain built from them is
// trusted only when it reaches a CA of client_ca and passes every check. Only certificates that
// were part of a verified chain are taken, so a client cannot fill the pool with others.
#pragma once

#include <openssl/x509.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pillar::http::internal {

struct X509StackFree {
  void operator()(STACK_OF(X509) * stack) const;
};
using X509Stack = std::unique_ptr<STACK_OF(X509), X509StackFree>;

class IntermediatePool {
 public:
  // At most `capacity` certificates, the most recently seen kept: a PKI has a handful of
  // intermediates, so one evicted is one that clients stopped sending.
  explicit IntermediatePool(size_t capacity = 64);
  ~IntermediatePool();
  IntermediatePool(const IntermediatePool&) = delete;
  IntermediatePool& operator=(const IntermediatePool&) = delete;

  // Takes the certificates of `verified` (a chain as X509_verify_cert built it: the client's
  // first, its trust anchor last) between its first and its last. Null or short chains add
  // nothing.
  void Remember(STACK_OF(X509) * verified);

  // A new stack of `sent`'s certificates (null: none) followed by the pool's, each referenced
  // again, for a chain check's untrusted certificates. Null only when out of memory.
  X509Stack With(STACK_OF(X509) * sent) const;

  size_t size() const;

 private:
  struct Release {
    void operator()(X509* cert) const;
  };
  using Cert = std::unique_ptr<X509, Release>;

  mutable absl::Mutex mu_;
  const size_t capacity_;
  // Least recently seen first.
  std::vector<Cert> certs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar::http::internal
