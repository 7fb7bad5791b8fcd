// Stage: job. Asynchronous requests (jobs/job_queue.h) enter and leave here.
//
// Submitting: an infer request with `Prefer: respond-async` has been authenticated, routed to a
// version, authorized, decoded and charged against its limits like any other (so a bad or
// refused request still gets its 4xx at once). This stage stores it as a job and answers 202
// with `Location: /v2/jobs/<id>` and `Preference-Applied: respond-async`; the job queue later
// runs it through the whole chain again, as the same principal.
//
// Reading (GET /v2/jobs/<id>): only the principal that submitted a job sees it; anyone else gets
// the 404 of a job that does not exist, and the decision is audited. A queued job answers 202
// with its position and estimated wait (and Retry-After); a running one 202; a finished one the
// stored response, with the status, body and headers the request would have had if sent
// synchronously. Every answer says the job's state in X-Pillar-Job-State.
#pragma once

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "jobs/job_queue.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class JobStage final : public pipeline::Stage {
 public:
  // `queue` null: respond-async is ignored (requests run synchronously) and job reads are 404.
  JobStage(jobs::JobQueue* queue, audit::AuditSink& audit, const Clock& clock = SystemClock())
      : queue_(queue), audit_(audit), clock_(clock) {}
  std::string_view name() const override { return "job"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  pipeline::StageResult Submit(pipeline::Exchange& ex);
  pipeline::StageResult Read(pipeline::Exchange& ex);
  void Answer(pipeline::Exchange& ex, state::JobRecord job) const;

  jobs::JobQueue* queue_;
  audit::AuditSink& audit_;
  const Clock& clock_;
};

}  // namespace pillar::stages
