#include "stages/authorize_stage.h"

#include "common/strings.h"
#include "policy/policy.h"
#include "stages/access.h"
#include "stages/exchange_event.h"

namespace pillar::stages {

using policy::Decision;
using policy::Plane;
using policy::Resource;

pipeline::StageResult AuthorizeStage::OnRequest(pipeline::Exchange& ex) {
  // A wiring mistake (no principal, no policy) fails closed.
  if (ex.principal == nullptr || ex.policy == nullptr) {
    ex.Fail(absl::UnauthenticatedError("no authenticated principal"));
    return pipeline::StageResult::kStop;
  }
  // A job is read by the principal that submitted it and by nobody else: the job stage decides
  // (and audits) that once it has the job; no policy rule can widen it.
  if (ex.operation == pipeline::Operation::kJob) return pipeline::StageResult::kContinue;
  const Plane plane = PlaneOf(ex);
  const Resource resource =
      ex.model != nullptr ? ResourceOf(*ex.model) : Resource{ex.resource, nullptr};
  Decision decision;
  if (ex.granted_by != nullptr) {
    decision.allowed = true;  // decided by the route stage, with this request's snapshot
    decision.rule = ex.granted_by;
  } else {
    decision = ex.policy->Evaluate(*ex.principal, plane, ex.action, resource);
  }
  auto explain = [&] {
    return decision.Explain(ex.policy->source(), *ex.principal, plane, ex.action, ex.resource);
  };
  const bool recorded = audit_.Record(
      ExchangeEvent(ex, audit::EventKind::kAuthorization, decision.allowed, explain, clock_));
  if (decision.allowed && !recorded) {
    // The audit log is configured to refuse what it cannot record (R-SEC-7 over availability).
    ex.Fail(absl::UnavailableError("the audit log cannot keep up; request refused"));
    return pipeline::StageResult::kStop;
  }
  if (decision.allowed) return pipeline::StageResult::kContinue;
  ex.Fail(absl::PermissionDeniedError(
      StrCat(ex.principal->id, " may not ", ex.action, " on ", ex.resource)));
  ex.error = explain();
  return pipeline::StageResult::kStop;
}

}  // namespace pillar::stages
