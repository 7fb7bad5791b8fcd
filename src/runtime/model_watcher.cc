#include "runtime/model_watcher.h"

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::runtime {
namespace {

void Audit(audit::AuditSink& sink, std::string_view action, std::string_view resource, bool ok,
           const std::string& reason) {
  sink.Record({.kind = audit::EventKind::kModel,
               .allowed = ok,
               .time_us = absl::GetCurrentTimeNanos() / 1000,
               .principal = "pillar",
               .tenant = {},
               .action = action,
               .resource = resource,
               .request_id = {},
               .remote = {},
               .explain = [&] { return reason; }});
}

bool SameRegistry(const ModelRegistry& a, const ModelRegistry& b) {
  if (a.versions() != b.versions() || a.aliases() != b.aliases()) return false;
  if (a.model_errors().size() != b.model_errors().size()) return false;
  for (size_t i = 0; i < a.model_errors().size(); ++i) {
    if (a.model_errors()[i].first != b.model_errors()[i].first ||
        a.model_errors()[i].second != b.model_errors()[i].second) {
      return false;
    }
  }
  return true;
}

}  // namespace

ModelWatcher::ModelWatcher(models::ModelRepository repository, RunnerLoader loader,
                           absl::Duration interval, audit::AuditSink& audit)
    : repository_(std::move(repository)),
      loader_(std::move(loader)),
      interval_(interval),
      audit_(audit),
      last_scan_(repository_.Scan()),
      catalog_(ModelRegistry::Build(last_scan_, loader_, nullptr)) {
  Report(nullptr, *catalog_.Current(), {});
}

ModelWatcher::~ModelWatcher() { StopThread(); }

void ModelWatcher::StopThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ModelWatcher::Start() {
  const bool polling = interval_ > absl::ZeroDuration();
  thread_ = std::thread([this, polling] {
    NameThisThread("model-watcher");
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                 polling ? interval_ : kRetryWithoutPolling)) {
          return;
        }
      }
      if (polling) {
        CheckNow();
      } else {
        RetryFailed();
      }
    }
  });
}

bool ModelWatcher::RetryFailed() {
  std::erase_if(retired_, [](const auto& v) { return v.use_count() == 1; });
  const std::shared_ptr<const ModelRegistry> before = catalog_.Current();
  const bool any = std::any_of(before->versions().begin(), before->versions().end(),
                               [](const auto& v) { return RetriedAtEveryScan(v->status); });
  return any && Rebuild(before, last_scan_);
}

bool ModelWatcher::CheckNow() {
  // Versions retired earlier go once the registry snapshots of their last requests are gone.
  std::erase_if(retired_, [](const auto& v) { return v.use_count() == 1; });
  const std::shared_ptr<const ModelRegistry> before = catalog_.Current();
  models::ScanResult scan = repository_.Scan(&before->aliases());
  if (!scan.unreadable.ok()) {
    // Not what the store holds: out of descriptors, an I/O error. Unloading on it would take
    // every model out of service for a moment's shortage; the next scan sees the store again.
    if (unreadable_ != scan.unreadable.message()) {
      unreadable_ = std::string(scan.unreadable.message());
      std::fprintf(stderr,
                   "pillar: cannot read the model store (%s); what is served stays as it is\n",
                   unreadable_.c_str());
    }
    return false;
  }
  if (!unreadable_.empty()) {
    unreadable_.clear();
    std::fprintf(stderr, "pillar: the model store can be read again\n");
  }
  last_scan_ = scan;
  return Rebuild(before, std::move(scan));
}

bool ModelWatcher::Rebuild(const std::shared_ptr<const ModelRegistry>& before,
                           models::ScanResult scan) {
  ModelRegistry::Versions retired;
  std::shared_ptr<const ModelRegistry> after =
      ModelRegistry::Build(std::move(scan), loader_, before.get(), &retired);
  if (SameRegistry(*before, *after)) return false;
  catalog_.Publish(after);
  Report(before.get(), *after, retired);
  retired_.insert(retired_.end(), retired.begin(), retired.end());
  return true;
}

void ModelWatcher::UnloadAll() {
  // The thread's scans and retries first: one running beside this raced it over what is served
  // and over the failures and retired versions, and could load a version again after it (review
  // helper-136, from the code).
  StopThread();
  ModelRegistry::Versions retired;
  const std::shared_ptr<const ModelRegistry> before = catalog_.Current();
  catalog_.Publish(ModelRegistry::Build({}, loader_, before.get(), &retired));
  Report(before.get(), *catalog_.Current(), retired);
  retired_.clear();
}

void ModelWatcher::Report(const ModelRegistry* before, const ModelRegistry& after,
                          const ModelRegistry::Versions& retired) {
  auto had = [&](const std::shared_ptr<ModelVersion>& v) {
    if (before == nullptr) return false;
    for (const auto& old : before->versions()) {
      if (old == v) return true;
    }
    return false;
  };
  for (const auto& v : after.versions()) {
    if (had(v)) continue;
    if (v->status.ok()) {
      failures_.erase(v->resource);
      Audit(audit_, "load", v->resource, true, "");
    } else {
      // A load retried at every scan (it failed for a shortage) is said once per reason, not
      // once per poll_ms (review helper-56).
      std::string& reported = failures_[v->resource];
      if (reported == v->status.message()) continue;
      reported = std::string(v->status.message());
      std::fprintf(stderr, "pillar: model %s version %lld failed to load: %s\n", v->name.c_str(),
                   static_cast<long long>(v->version), std::string(v->status.message()).c_str());
      Audit(audit_, "load", v->resource, false, std::string(v->status.message()));
    }
  }
  for (const auto& v : retired) {
    if (!v->status.ok()) continue;  // never loaded: nothing leaves service
    std::fprintf(stderr, "pillar: model %s version %lld leaves service\n", v->name.c_str(),
                 static_cast<long long>(v->version));
    Audit(audit_, "unload", v->resource, true, "");
  }
  for (const auto& [model, aliases] : after.aliases()) {
    for (const auto& [alias, version] : aliases) {
      int64_t old = 0;
      if (before != nullptr) {
        if (auto m = before->aliases().find(model); m != before->aliases().end()) {
          if (auto a = m->second.find(alias); a != m->second.end()) old = a->second;
        }
      }
      if (old == version) continue;
      const std::string move =
          old == 0 ? StrCat(alias, " -> ", version) : StrCat(alias, ": ", old, " -> ", version);
      std::fprintf(stderr, "pillar: model %s alias %s now serves version %lld\n", model.c_str(),
                   alias.c_str(), static_cast<long long>(version));
      Audit(audit_, "alias", StrCat("model:", model, "/", alias), true, move);
    }
  }
  if (before == nullptr || before->model_errors() != after.model_errors()) {
    for (const auto& [model, status] : after.model_errors()) {
      std::fprintf(stderr, "pillar: model store: %s%s%s\n", model.c_str(),
                   model.empty() ? "" : ": ", std::string(status.message()).c_str());
    }
  }
}

}  // namespace pillar::runtime
