// Stage: authenticate. Turns `Authorization: Bearer <api key>` into the exchange's principal,
// or ends the request with 401 (R-SEC-12). JWT joins here in a later issue.
#pragma once

#include "identity/authenticator.h"
#include "pipeline/stage.h"

namespace pillar::identity {

class AuthenticateStage final : public pipeline::Stage {
 public:
  explicit AuthenticateStage(const Authenticator& authenticator) : authenticator_(authenticator) {}
  std::string_view name() const override { return "authenticate"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const Authenticator& authenticator_;
};

}  // namespace pillar::identity
