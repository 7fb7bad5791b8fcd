// Stage: authorize (R-SEC-5). Decides the request's action on its resource with the policy
// snapshot the route stage took; a denial answers 403 with a message that names the action and
// resource but not the policy (the full reason goes to the access log and the audit sink).
// Every decision, allow or deny, is handed to the audit sink.
#pragma once

#include "audit/audit_sink.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class AuthorizeStage final : public pipeline::Stage {
 public:
  explicit AuthorizeStage(audit::AuditSink& audit) : audit_(audit) {}
  std::string_view name() const override { return "authorize"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  audit::AuditSink& audit_;
};

}  // namespace pillar::stages
