// Internal to src/http: the thread ("tls-watcher") that reads TLS listeners' files again when
// they change ([data]/[admin] tls_reload_ms) and gives the listeners new contexts (ListenerTls).
//
// Listeners that both ask for client certificates ([data] and [admin]: [[mtls_client]] entries
// may span them) are one group, however their files are named: their files are read and their
// contexts replaced together, or not at all, so that a certificate revoked on one listener is
// never still good on the other (review helper-65 named one file two ways and split them). A change
// that fails a check made at start, or would put back an older CRL, is refused whole: said once,
// counted, tried again (a CRL dated a few seconds ahead becomes good; a shortage of descriptors
// passes) at growing intervals, and the files in use stay.
#pragma once

#include <list>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "http/server_state.h"

namespace pillar::http::internal {

// Whether `a` and `b` both ask for client certificates: such listeners reload together.
bool BothVerifyClients(const ListenerOptions& a, const ListenerOptions& b);

// InvalidArgument when `options` and one of `listeners` both ask for client certificates but
// differ in tls_reload_ms: they are read again together, at one interval.
[[nodiscard]] absl::Status CheckSharedReload(const std::list<Listener>& listeners,
                                             const ListenerOptions& options);

// At start, for a listener whose context `made` was just made: Unavailable when another of
// `listeners` read the same client_crl file (one inode) and got other lists (it changed between
// the two reads).
[[nodiscard]] absl::Status CheckStartingCrls(const std::list<Listener>& listeners,
                                             const ListenerOptions& options, SSL_CTX* made);

class TlsWatcher {
 public:
  TlsWatcher(std::list<Listener>& listeners, Core& core);
  ~TlsWatcher();
  TlsWatcher(const TlsWatcher&) = delete;
  TlsWatcher& operator=(const TlsWatcher&) = delete;

  // Starts the thread, if any listener is watched.
  void Start();
  // Stops it and waits for it; idempotent.
  void Stop();

 private:
  struct Group {
    std::vector<Listener*> members;
    absl::Duration every;
    absl::Time next;  // when its files are looked at again
    // The last change refused: its files' stamps and why (said and counted once), and when it
    // is tried again if they stay as they are.
    std::vector<TlsFileStamps> refused_stamps;
    std::string refused_why;
    absl::Duration backoff;
    absl::Time retry;
  };

  void Run();
  void Check(Group& group, absl::Time now);
  // `name`: the listener whose files failed; `reason`: why.
  void Refuse(Group& group, std::vector<TlsFileStamps> stamps, const std::string& name,
              const std::string& reason, absl::Time now);

  Core& core_;
  std::vector<Group> groups_;  // set before Start, the thread's alone after
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pillar::http::internal
