#include "identity/authenticate_stage.h"

namespace pillar::identity {

pipeline::StageResult AuthenticateStage::OnRequest(pipeline::Exchange& ex) {
  absl::StatusOr<Principal> who = authenticator_.Authenticate(ex.authorization);
  if (!who.ok()) {
    ex.Fail(who.status());
    return pipeline::StageResult::kStop;
  }
  ex.principal = pipeline::Principal{std::move(who->key_id), std::move(who->key_name)};
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::identity
