// Stage: authenticate. Turns the request's credentials into the exchange's principal, or ends
// the request with 401 (R-SEC-12); every refusal is handed to the audit sink.
#pragma once

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "identity/authenticator.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class AuthenticateStage final : public pipeline::Stage {
 public:
  // `clock` decides expiry (of keys, tokens, rotation overlaps) and stamps audit events.
  AuthenticateStage(const identity::Authenticator& authenticator, audit::AuditSink& audit,
                    const Clock& clock = SystemClock())
      : authenticator_(authenticator), audit_(audit), clock_(clock) {}
  std::string_view name() const override { return "authenticate"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const identity::Authenticator& authenticator_;
  audit::AuditSink& audit_;
  const Clock& clock_;
};

}  // namespace pillar::stages
