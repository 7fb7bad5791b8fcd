// The backends file ([upstream] backends_file; models/backends_file.h) as it is in service: read
// at start, watched afterwards (FileWatcher, every [upstream] backends_reload_ms), and applied to
// the remote versions in service without a restart. A file that does not parse, that group or
// others may write, or that would give a loaded version an invalid configuration is refused
// whole (its file:line in the log and an audit record), and the previous one stays.
//
//   BackendsSource backends(config.backends_file, config.backends_reload, &audit);
//   PILLAR_RETURN_IF_ERROR(backends.Load());
//   ... loader: backends.Current()->Apply(model, signed_remote) ...
//   backends.Start(catalog);   // watches the file; reconciles versions loaded since
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/audit_sink.h"
#include "common/file_watcher.h"
#include "models/backends_file.h"
#include "runtime/model_catalog.h"

namespace pillar::app {

class BackendsSource {
 public:
  // An empty `path`: no file; Current() names no model.
  BackendsSource(std::string path, absl::Duration interval, audit::AuditSink* audit);
  ~BackendsSource();
  BackendsSource(const BackendsSource&) = delete;
  BackendsSource& operator=(const BackendsSource&) = delete;

  // The first read: an error stops the server from starting.
  [[nodiscard]] absl::Status Load();
  // From now on, file changes are applied to the remote versions of `catalog`, and every
  // `interval` the versions loaded since the last change are brought up to date.
  void Start(const runtime::ModelCatalog& catalog);
  std::shared_ptr<const models::BackendsFile> Current() const;
  // Stops watching and reconciling (before the catalog goes); the destructor does it too.
  void Stop();

 private:
  // Parses `text`, checks it against every remote version in service, and takes it in.
  [[nodiscard]] absl::Status Apply(const std::string& text);
  // Reconfigures the remote versions in service that have not had the current file yet.
  void Reconcile();
  void Audit(bool ok, const std::string& reason);

  const std::string path_;
  const absl::Duration interval_;
  audit::AuditSink* audit_;
  const runtime::ModelCatalog* catalog_ = nullptr;
  std::unique_ptr<FileWatcher> watcher_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const models::BackendsFile> current_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Which generation each version in service (by runner, and the stamp of its load) has.
  std::map<std::pair<const runtime::Runner*, int64_t>, int64_t> applied_ ABSL_GUARDED_BY(mu_);

  absl::Mutex reconcile_mu_;  // one Reconcile() pass at a time
  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread reconciler_;
};

}  // namespace pillar::app
