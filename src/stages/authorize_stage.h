// Stage: authorize (R-SEC-5). Decides the request's action on its resource with the policy
// snapshot the route stage took; a denial answers 403 with a message that names the action and
// resource but not the policy (the full reason goes to the access log and the audit sink).
// Every decision, allow or deny, is handed to the audit sink.
#pragma once

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class AuthorizeStage final : public pipeline::Stage {
 public:
  // `clock` stamps the decision's audit event.
  explicit AuthorizeStage(audit::AuditSink& audit, const Clock& clock = SystemClock())
      : audit_(audit), clock_(clock) {}
  std::string_view name() const override { return "authorize"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  audit::AuditSink& audit_;
  const Clock& clock_;
};

}  // namespace pillar::stages
