// The registry in service now. The store watcher publishes a new registry when versions or
// aliases change; each request takes the current one once (one reference count) and keeps it
// to its end, so a switch is atomic for every request and never pulls a version from under one.
//
//   catalog.Publish(ModelRegistry::Build(scan, loader, catalog.Current().get(), &retired));
//   std::shared_ptr<const ModelRegistry> models = catalog.Current();
#pragma once

#include <memory>

#include "absl/synchronization/mutex.h"
#include "runtime/model_registry.h"

namespace pillar::runtime {

class ModelCatalog {
 public:
  explicit ModelCatalog(std::shared_ptr<const ModelRegistry> initial)
      : current_(std::move(initial)) {}

  std::shared_ptr<const ModelRegistry> Current() const {
    absl::ReaderMutexLock lock(&mu_);
    return current_;
  }
  void Publish(std::shared_ptr<const ModelRegistry> next) {
    absl::MutexLock lock(&mu_);
    current_.swap(next);
    // `next` (the old registry) is released outside the lock.
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const ModelRegistry> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pillar::runtime
