#include "stages/authenticate_stage.h"

#include "common/strings.h"
#include "guard/screen.h"

namespace pillar::stages {

using identity::Principal;

namespace {

// How long the credentials checked when a request's header arrived stand for its chain. A body
// that takes longer to arrive has them checked again, so that a key revoked (or expired) while
// a slow client sends its body does not run; within it, the check is as current as the key
// table, which a revocation made elsewhere reaches within key_refresh_ms (200 ms by default).
// Measured on the monotonic clock, which a step of the wall clock cannot stretch.
constexpr int64_t kHeaderCheckStandsNs = 100'000'000;

bool HeaderCheckStands(const pipeline::Exchange& ex, const Clock& clock, int64_t now_us) {
  if (ex.principal == nullptr || ex.principal_checked_ns == 0) return false;
  const int64_t expires_us = ex.principal->expires_us;
  return clock.MonotonicNanos() - ex.principal_checked_ns <= kHeaderCheckStandsNs &&
         (expires_us == 0 || now_us < expires_us);
}

}  // namespace

pipeline::StageResult AuthenticateStage::OnRequest(pipeline::Exchange& ex) {
  const int64_t now_us = clock_.UnixMicros();
  if (!ex.job_run && HeaderCheckStands(ex, clock_, now_us)) return pipeline::StageResult::kContinue;
  // A job's run carries the principal that submitted it, checked again here: a key revoked
  // since (or a token expired) stops the job as it would stop a request. A request whose
  // credentials did not authenticate when its header arrived was answered without its body
  // being read: refused here for that, as it was found then.
  absl::StatusOr<std::shared_ptr<const Principal>> who =
      ex.job_run && ex.principal != nullptr ? authenticator_.Reauthenticate(*ex.principal, now_us)
      : !ex.caller_refusal.empty()
          ? absl::UnauthenticatedError(ex.caller_refusal)
          : authenticator_.Authenticate(ex.authorization, ex.peer_identity, ex.listener, now_us);
  if (!who.ok() && ex.peer_unnamed && ex.authorization.empty() && !ex.job_run) {
    // Not "missing Authorization header": a certificate came, and verified, but names nobody
    // (review helper-60: such refusals were recorded as if nothing had been presented).
    who = absl::UnauthenticatedError(
        "the client certificate names nobody: more than one name of the kind this listener "
        "reads, or past the end of its chain or of the revocation lists it was checked against");
  }
  if (!who.ok()) {
    // The refusal may quote what the client sent (a token's kid, a certificate's name): what the
    // guard's recognizers find in it is not kept (review helper-136: a pillar key as a kid reached
    // the audit log; the access log had it redacted).
    const std::string reason = guard::RedactAll(
        std::string_view(who.status().message().data(), who.status().message().size()));
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
