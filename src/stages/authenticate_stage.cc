#include "stages/authenticate_stage.h"

#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::stages {

using identity::Principal;

pipeline::StageResult AuthenticateStage::OnRequest(pipeline::Exchange& ex) {
  const int64_t now_us = clock_.UnixMicros();
  // A job's run carries the principal that submitted it, checked again here: a key revoked
  // since (or a token expired) stops the job as it would stop a request.
  absl::StatusOr<std::shared_ptr<const Principal>> who =
      ex.job_run && ex.principal != nullptr
          ? authenticator_.Reauthenticate(*ex.principal, now_us)
          : authenticator_.Authenticate(ex.authorization, ex.peer_identity, ex.listener, now_us);
  if (!who.ok() && ex.peer_unnamed && ex.authorization.empty() && !ex.job_run) {
    // Not "missing Authorization header": a certificate came, and verified, but names nobody
    // (review helper-60: such refusals were recorded as if nothing had been presented).
    who = absl::UnauthenticatedError(
        "the client certificate names nobody: more than one name of the kind this listener "
        "reads, or past the end of its chain or of the revocation lists it was checked against");
  }
  if (!who.ok()) {
    const std::string reason(who.status().message());
    // The path as the client sent it, which may hold anything: what the guard's recognizers
    // find in it is not kept.
    const std::string resource = guard::RedactPath(ex.target);
    audit_.Record({.kind = audit::EventKind::kAuthentication,
                   .allowed = false,
                   .time_us = now_us,
                   // A certificate's name as its principal would be written, never bare: a
                   // certificate named "key:0123..." must not be taken for that key (found by
                   // review helper-59).
                   .principal = ex.job_run && ex.principal ? ex.principal->id
                                : ex.peer_identity.empty() ? std::string()
                                                           : StrCat("mtls:", ex.peer_identity),
                   .tenant = {},
                   .action = "authenticate",
                   .resource = resource,
                   .request_id = ex.request_id,
                   .remote = ex.remote,
                   .explain = [&] { return reason; }});
    ex.Fail(who.status());
    return pipeline::StageResult::kStop;
  }
  ex.principal = std::move(*who);
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::stages
