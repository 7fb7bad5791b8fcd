#include "app/backends_source.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/time/clock.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::app {
namespace {

constexpr uintmax_t kMaxBackendsBytes = 4 << 20;

}  // namespace

BackendsSource::BackendsSource(std::string path, absl::Duration interval, audit::AuditSink* audit)
    : path_(std::move(path)),
      interval_(interval),
      audit_(audit),
      current_(std::make_shared<models::BackendsFile>()) {}

BackendsSource::~BackendsSource() { Stop(); }

void BackendsSource::Stop() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  if (reconciler_.joinable()) reconciler_.join();
  watcher_.reset();  // before the members its callback uses
}

absl::Status BackendsSource::Load() {
  if (path_.empty()) return absl::OkStatus();
  // It says where models' traffic goes, with their upstream credentials: it must be as
  // protected as pillar.toml, checked on the descriptor that is read (ReadTrustedFile).
  watcher_ = std::make_unique<FileWatcher>(
      path_, "backends file", interval_, kMaxBackendsBytes,
      [this](const std::string& text) { return Apply(text); },
      [this](const std::filesystem::path& path, std::uintmax_t max_bytes) {
        absl::StatusOr<std::string> text = ReadTrustedFile(path, max_bytes);
        if (text.status().code() == absl::StatusCode::kPermissionDenied) {
          Audit(false, std::string(text.status().message()));
        }
        return text;
      });
  return watcher_->LoadNow();
}

void BackendsSource::Start(const runtime::ModelCatalog& catalog) {
  if (path_.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    catalog_ = &catalog;
  }
  if (interval_ <= absl::ZeroDuration()) return;
  watcher_->Start();
  reconciler_ = std::thread([this] {
    NameThisThread("backends");
    absl::MutexLock lock(&stop_mu_);
    while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) {
      stop_mu_.Unlock();
      Reconcile();
      stop_mu_.Lock();
    }
  });
}

std::shared_ptr<const models::BackendsFile> BackendsSource::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

absl::Status BackendsSource::Apply(const std::string& text) {
  absl::StatusOr<models::BackendsFile> parsed = models::BackendsFile::Parse(text, path_);
  if (!parsed.ok()) {
    Audit(false, std::string(parsed.status().message()));
    return parsed.status();
  }
  // Every remote version in service must take it, or none does.
  std::shared_ptr<const runtime::ModelRegistry> registry;
  {
    absl::MutexLock lock(&mu_);
    if (catalog_ != nullptr) registry = catalog_->Current();
  }
  if (registry != nullptr) {
    for (const auto& v : registry->versions()) {
      if (!v->config || !v->config->networked()) continue;
      if (absl::StatusOr<models::RemoteConfig> applied = parsed->Apply(v->name, v->config->remote);
          !applied.ok()) {
        absl::Status refused =
            absl::InvalidArgumentError(StrCat(applied.status().message(), " (for model ", v->name,
                                              " version ", v->version_text, ")"));
        Audit(false, std::string(refused.message()));
        return refused;
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    current_ = std::make_shared<const models::BackendsFile>(std::move(*parsed));
    ++generation_;
  }
  Audit(true, StrCat("sha256 ", HexEncode(Sha256(text))));
  Reconcile();
  return absl::OkStatus();
}

void BackendsSource::Reconcile() {
  // One pass at a time (the watcher's, after a change, and the reconciler's): a pass that read an
  // older file must not apply it after a newer one.
  absl::MutexLock pass(&reconcile_mu_);
  std::shared_ptr<const runtime::ModelRegistry> registry;
  std::shared_ptr<const models::BackendsFile> file;
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    if (catalog_ == nullptr) return;
    registry = catalog_->Current();
    file = current_;
    generation = generation_;
  }
  std::map<std::pair<const runtime::Runner*, int64_t>, int64_t> seen;
  for (const auto& v : registry->versions()) {
    if (!v->config || !v->config->networked() || !v->runner) continue;
    const std::pair<const runtime::Runner*, int64_t> key(v->runner.get(), v->stamp);
    int64_t had;
    {
      absl::MutexLock lock(&mu_);
      auto it = applied_.find(key);
      had = it == applied_.end() ? -1 : it->second;
    }
    seen[key] = generation;
    if (had == generation) continue;
    absl::StatusOr<models::RemoteConfig> applied = file->Apply(v->name, v->config->remote);
    absl::Status s = applied.ok() ? v->runner->Reconfigure(*applied) : applied.status();
    if (!s.ok()) {
      std::fprintf(stderr, "pillar: backends file not applied to model %s version %s: %s\n",
                   v->name.c_str(), v->version_text.c_str(), std::string(s.message()).c_str());
    }
  }
  absl::MutexLock lock(&mu_);
  applied_ = std::move(seen);
}

void BackendsSource::Audit(bool ok, const std::string& reason) {
  if (audit_ == nullptr) return;
  audit_->Record({.kind = audit::EventKind::kModel,
                  .allowed = ok,
                  .time_us = absl::GetCurrentTimeNanos() / 1000,
                  .principal = "pillar",
                  .tenant = {},
                  .action = "backends_load",
                  .resource = path_,
                  .request_id = {},
                  .remote = {},
                  .explain = [&] {
                    return ok ? reason : StrCat("refused, the previous file stays: ", reason);
                  }});
}

}  // namespace pillar::app
