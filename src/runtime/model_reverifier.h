// Re-verifies the signatures of the model versions a server is serving, every `interval`, and
// at once when a file of one changes (its size, inode or modification time, looked at every
// `watch_interval`): a version whose files no longer match what a trusted key signed (a weight
// file swapped on disk, a file added) is withdrawn at once — requests route to the other
// versions loaded — with an alert on stderr and an audit event (R-SEC-2, R-REL-9).
//
//   ModelReverifier reverifier(catalog, trusted_keys, absl::Seconds(60), absl::Seconds(1), audit);
//   reverifier.Start();   ...   // stops (and joins) when destroyed
#pragma once

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/audit_sink.h"
#include "runtime/model_catalog.h"
#include "signing/signing_key.h"

namespace pillar::runtime {

class ModelReverifier {
 public:
  ModelReverifier(const ModelCatalog& catalog, std::vector<signing::PublicKey> trusted,
                  absl::Duration interval, absl::Duration watch_interval, audit::AuditSink& audit);
  ~ModelReverifier();
  ModelReverifier(const ModelReverifier&) = delete;
  ModelReverifier& operator=(const ModelReverifier&) = delete;

  void Start();
  // One pass over every ready version; returns how many it withdrew.
  int CheckNow();
  // Verifies only the versions whose files changed since the last look; how many it withdrew.
  int CheckChanged();

 private:
  const ModelCatalog& catalog_;
  const std::vector<signing::PublicKey> trusted_;
  // False (and withdrawn) when `v` no longer verifies.
  bool CheckVersion(ModelVersion& v);

  const absl::Duration interval_;
  const absl::Duration watch_interval_;
  audit::AuditSink& audit_;
  std::map<std::string, std::string> fingerprints_;  // by directory; the watcher thread only
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pillar::runtime
