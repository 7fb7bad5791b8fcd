// Internal to src/http: a TLS listener's context, made from its files (certificate chain, private
// key, client CA bundle, client CRLs) with every check they get, at start and again whenever
// they change (ListenerTls, TlsReloader in server.cc). A connection is made with the context
// current when it was accepted and keeps it; the next connections get the new one.
#pragma once

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"
#include "http/intermediate_pool.h"
#include "http/revocation.h"
#include "http/server.h"
#include "monitor/metrics.h"

namespace pillar::http::internal {

// The listener's TLS context from its files as they are now: InvalidArgument or
// PermissionDenied naming the file that cannot be used (the private key readable by others, a
// CRL that would not be checked as given: http/revocation.h).
[[nodiscard]] absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const ListenerOptions& options);

// A digest of what `ctx` was made from as OpenSSL holds it (the certificate and its chain, the
// client CAs and CRLs): equal for files rewritten with the same content, which then need no new
// context (every connection made before would close for nothing).
std::string ContextDigest(SSL_CTX* ctx);
// The part of it that clients are verified against: the client CAs and CRLs.
std::string VerificationDigest(SSL_CTX* ctx);

// Sets pillar_tls_expiry_timestamp_seconds for the listener (`gauge` may be null): its
// certificate's end, and its client CRLs' earliest nextUpdate, which is said on stderr too.
void PublishTlsExpiry(const ListenerOptions& options, SSL_CTX* ctx,
                      monitor::Family<monitor::Gauge>* gauge);

// What a TLS listener's files were when its context was made (any of them may change alone).
struct TlsFileStamps {
  FileStamp certificate, private_key, client_ca, client_crl;
  bool operator==(const TlsFileStamps&) const = default;
};
TlsFileStamps StampTlsFiles(const ListenerOptions& options);

// The context a TLS listener makes its new connections with, replaced whole when its files
// change. Each replacement has a new generation: a connection verified under an older one has
// its client's chain checked again against the current CAs and CRLs at its next request.
class ListenerTls {
 public:
  ListenerTls(std::shared_ptr<boost::asio::ssl::context> context, TlsFileStamps stamps)
      : context_(std::move(context)),
        digest_(ContextDigest(context_->native_handle())),
        verification_(VerificationDigest(context_->native_handle())),
        stamps_(stamps) {}

  // Before the listener serves: its client CRL history, kept in `raise`'s marks when given
  // (under "tls/<listener>/crl/"), so that a starting CRL older than one used before a restart is
  // refused as at a reload (InvalidArgument; Unavailable when the marks cannot be read or
  // kept); the starting CRLs are then the newest seen.
  [[nodiscard]] absl::Status StartHistory(const std::string& listener, RaiseMark raise);

  struct Current {
    std::shared_ptr<boost::asio::ssl::context> context;
    uint64_t generation = 0;
    // Changes only when what clients are verified against (client CAs, CRLs) changed: a new
    // certificate alone does not make a client verified before check again (a resumed
    // connection, which holds only the client's own certificate, could not always pass).
    uint64_t verify_generation = 0;
  };
  Current Get() const {
    absl::MutexLock lock(&mu_);
    return {context_, generation_.load(std::memory_order_relaxed),
            verify_generation_.load(std::memory_order_relaxed)};
  }
  // Read on every request of a TLS connection: no lock.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  uint64_t verify_generation() const { return verify_generation_.load(std::memory_order_acquire); }

  // `digest`: ContextDigest(context), which the caller has already compared with digest().
  // Unavailable when its CRLs could not be kept in the marks: it is in use all the same (its
  // revocations matter more), and this process's history has them.
  [[nodiscard]] absl::Status Replace(std::shared_ptr<boost::asio::ssl::context> context,
                                     TlsFileStamps stamps, std::string digest) {
    std::string verification = VerificationDigest(context->native_handle());
    absl::Status remembered = crl_history_.Remember(context->native_handle());
    absl::MutexLock lock(&mu_);
    context_ = std::move(context);
    digest_ = std::move(digest);
    stamps_ = stamps;
    if (verification != verification_) {
      verification_ = std::move(verification);
      verify_generation_.fetch_add(1, std::memory_order_release);
    }
    generation_.fetch_add(1, std::memory_order_release);
    return remembered;
  }

  // The newest client CRL of each CA this listener has used: a reload may not go back.
  const CrlHistory& crl_history() const { return crl_history_; }

  // The intermediates its clients' verified chains had, for checking a client again after a
  // reload (a resumed connection holds only its client's own certificate).
  IntermediatePool& intermediates() { return intermediates_; }

  std::string digest() const {
    absl::MutexLock lock(&mu_);
    return digest_;
  }

  // The files' stamps when the current context was made, or when a reload of them was last
  // refused (so that a refused change is said once, and tried again when they change again).
  TlsFileStamps stamps() const {
    absl::MutexLock lock(&mu_);
    return stamps_;
  }
  void set_stamps(TlsFileStamps stamps) {
    absl::MutexLock lock(&mu_);
    stamps_ = stamps;
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
  std::string digest_ ABSL_GUARDED_BY(mu_);
  std::string verification_ ABSL_GUARDED_BY(mu_);
  TlsFileStamps stamps_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> verify_generation_{0};
  CrlHistory crl_history_;
  IntermediatePool intermediates_;
};

}  // namespace pillar::http::internal
