// Keeps the served models in step with the store: loads the versions the version policy and
// the aliases name, at start-up and then every poll interval, and publishes each new registry
// to the catalog in one step — a promotion, a rollback or a pushed version takes effect
// without a restart, and requests never see a half-switched state. A version that leaves is
// unloaded on this thread once its last request is done. Every load, unload and alias move is
// logged and audited (kind model). Without a poll interval the store is read at start-up only,
// but a version that failed to load for a reason of the moment (RetriedAtEveryScan: a shortage,
// a backends file that does not fit it yet) is still loaded again every kRetryWithoutPolling
// from that scan, as a polling watcher would at each scan.
//
//   ModelWatcher watcher(repository, loader, absl::Seconds(1), audit);
//   ModelCatalog& catalog = watcher.catalog();
//   watcher.Start();   ...   // stops (and joins) when destroyed
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/audit_sink.h"
#include "models/model_repository.h"
#include "runtime/model_catalog.h"

namespace pillar::runtime {

class ModelWatcher {
 public:
  static constexpr absl::Duration kRetryWithoutPolling = absl::Seconds(1);

  // Scans and loads once, synchronously.
  ModelWatcher(models::ModelRepository repository, RunnerLoader loader, absl::Duration interval,
               audit::AuditSink& audit);
  ~ModelWatcher();
  ModelWatcher(const ModelWatcher&) = delete;
  ModelWatcher& operator=(const ModelWatcher&) = delete;

  ModelCatalog& catalog() { return catalog_; }
  // Polls every interval until destroyed; with a zero interval, only retries (RetryFailed).
  void Start();
  // One scan; publishes a new registry when something changed. Returns whether it did.
  bool CheckNow();
  // Loads again, from the last scan (the store is not read), the versions that failed for a
  // reason of the moment; publishes a new registry when one of them changed. Returns whether it
  // did. Not concurrently with CheckNow (both run on the watcher's thread).
  bool RetryFailed();
  // Stops the thread Start() started, then unloads everything (at shutdown, while the runners'
  // event loop still exists). Nothing is loaded after it.
  void UnloadAll();

 private:
  // Ends the thread Start() started, if any, and waits for it.
  void StopThread();
  // Builds the registry `scan` describes over `before` and publishes it when it differs.
  bool Rebuild(const std::shared_ptr<const ModelRegistry>& before, models::ScanResult scan);
  void Report(const ModelRegistry* before, const ModelRegistry& after,
              const ModelRegistry::Versions& retired);

  const models::ModelRepository repository_;
  const RunnerLoader loader_;
  const absl::Duration interval_;
  audit::AuditSink& audit_;
  // What the last scan found (kept for RetryFailed): the constructor's, then each CheckNow's that
  // could read the store.
  models::ScanResult last_scan_;
  ModelCatalog catalog_;
  // Versions no registry names any more, destroyed here once no request holds them.
  ModelRegistry::Versions retired_;
  std::map<std::string, std::string> failures_;  // a failed version's resource -> reason reported
  std::string unreadable_;  // why the last scan could not read the store; empty when it could
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pillar::runtime
