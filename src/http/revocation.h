// Certificate revocation for a listener's client certificates ([data] / [admin] client_crl):
// the CRLs in a PEM file are checked for every certificate of a client's chain, so a revoked
// certificate (a stolen laptop's, a departed operator's) authenticates nobody, without
// replacing the CA.
//
//   PILLAR_RETURN_IF_ERROR(UseClientCrls(ssl_ctx, options.client_crl));   // after the CA
//
// Every CA that issues in a chain must have its CRL in the file: a chain with a certificate
// whose issuer has none fails its handshake ("unable to get certificate CRL"), as does one
// whose CRL has passed its nextUpdate. Revocation is failed closed: an out-of-date list refuses
// every client, never admits a revoked one. The file is read at start and again when it changes
// (http/tls_context.h: a new context, whose ticket keys are new, so no session verified under
// the old list is resumed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "http/server.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace pillar::http {

// The largest CRL file read (a CA with many revocations publishes a few MB).
inline constexpr std::uintmax_t kMaxCrlFileBytes = 64 << 20;

// Adds the CRLs of the PEM file `path` to the verification of `ctx`, whose client CA bundle is
// loaded, and turns on revocation checks for the whole chain. InvalidArgument, naming the file,
// when it holds no CRL or a malformed one, a CRL that no CA of the bundle signed, or one past its
// nextUpdate; PermissionDenied when someone other than pillar's user or root owns it or its group
// or others may write it (whoever can write it can take a revocation back).
[[nodiscard]] absl::Status UseClientCrls(SSL_CTX* ctx, const std::string& path);

// The newest CRL a listener has checked clients against for each CA, by the CA's name and key:
// for the life of the process, and across restarts when given marks (KeepMarks). CRLs are
// fetched from unauthenticated places and a signature says nothing of freshness: an older list
// put in the file (replayed) would take back the revocations made since, even after a file that
// left that CA's list out for a while (found by review helper-65), or after a restart. A CA
// given a new key (a re-key after a compromise, its numbering restarted) starts a history of its
// own.
class CrlHistory {
 public:
  CrlHistory();
  ~CrlHistory();
  CrlHistory(const CrlHistory&) = delete;
  CrlHistory& operator=(const CrlHistory&) = delete;

  // Also keeps each CA's newest crlNumber and lastUpdate in `raise`'s marks, named
  // `prefix` + the digest of the CA's name and key + "/number" or "/last_update". Before use.
  void KeepMarks(RaiseMark raise, std::string prefix);

  // InvalidArgument when `ctx` holds a CRL older than the newest seen of its CA: a lower
  // crlNumber, or, when either has none, an earlier lastUpdate; against the marks, a lower
  // crlNumber than the highest kept or an earlier lastUpdate than the latest kept. Unavailable
  // when the marks cannot be read (the history of this process was checked).
  [[nodiscard]] absl::Status CheckNotOlder(SSL_CTX* ctx) const;
  // Takes `ctx`'s CRLs as seen (the newer of each CA's stays). Unavailable when the marks could
  // not be raised (this process's history has them).
  [[nodiscard]] absl::Status Remember(SSL_CTX* ctx);

 private:
  struct Newest;
  mutable absl::Mutex mu_;
  std::unique_ptr<Newest> newest_ ABSL_GUARDED_BY(mu_);
  RaiseMark raise_;
  std::string prefix_;
};

// Whether every CA with a CRL in both `a` and `b` has the same CRL in each: listeners that
// check one client against the same files must check it against the same lists.
bool SameCrls(SSL_CTX* a, SSL_CTX* b);

// The earliest nextUpdate (unix seconds) of the CRLs `ctx` checks client certificates against;
// nullopt when it checks none. Past it, the lists say nothing of what was revoked since: a full
// handshake fails, and sessions verified before end there (peer_identity.h).
std::optional<int64_t> RevocationEnd(SSL_CTX* ctx);

}  // namespace pillar::http
