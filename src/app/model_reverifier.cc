#include "app/model_reverifier.h"

#include <cstdio>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "signing/model_manifest.h"

namespace pillar::app {

ModelReverifier::ModelReverifier(const runtime::ModelCatalog& catalog,
                                 std::vector<signing::PublicKey> trusted, absl::Duration interval,
                                 audit::AuditSink& audit)
    : catalog_(catalog), trusted_(std::move(trusted)), interval_(interval), audit_(audit) {}

ModelReverifier::~ModelReverifier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ModelReverifier::Start() {
  thread_ = std::thread([this] {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
      if (stopping_) break;
      mu_.Unlock();
      CheckNow();
      mu_.Lock();
    }
  });
}

int ModelReverifier::CheckNow() {
  int withdrawn = 0;
  const std::shared_ptr<const runtime::ModelRegistry> registry = catalog_.Current();
  for (const auto& v : registry->versions()) {
    if (!v->ready()) continue;
    absl::StatusOr<signing::VerifiedModel> verified =
        signing::VerifyModel(v->directory.string(), trusted_);
    if (verified.ok()) continue;
    const std::string reason =
        StrCat("signature check failed while serving: ", verified.status().message());
    v->Withdraw(reason);
    ++withdrawn;
    std::fprintf(stderr, "pillar: ALERT: model %s version %lld withdrawn: %s\n", v->name.c_str(),
                 static_cast<long long>(v->version), reason.c_str());
    audit_.Record({.kind = audit::EventKind::kModel,
                   .allowed = false,
                   .time_us = absl::GetCurrentTimeNanos() / 1000,
                   .principal = "pillar",
                   .tenant = {},
                   .action = "withdraw",
                   .resource = v->resource,
                   .request_id = {},
                   .remote = {},
                   .explain = [&] { return reason; }});
  }
  return withdrawn;
}

}  // namespace pillar::app
