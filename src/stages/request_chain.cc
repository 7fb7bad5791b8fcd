#include "stages/request_chain.h"

#include <utility>

#include "stages/admit_stage.h"
#include "stages/authenticate_stage.h"
#include "stages/authorize_stage.h"
#include "stages/decode_stage.h"
#include "stages/guard_stage.h"
#include "stages/job_stage.h"
#include "stages/observe_stage.h"
#include "stages/route_stage.h"

namespace pillar::stages {

std::vector<std::unique_ptr<pipeline::Stage>> RequestStages(ChainParts parts) {
  std::vector<std::unique_ptr<pipeline::Stage>> chain;
  // Times the request and writes its access-log line and metrics; first, so that its
  // OnResponse runs last and sees every refusal.
  chain.push_back(std::make_unique<ObserveStage>(parts.metrics, parts.access_log, parts.clock));
  // Who is asking: an API key, a JWT or a client certificate; 401 for none or a bad one.
  chain.push_back(
      std::make_unique<AuthenticateStage>(parts.authenticator, parts.audit, parts.clock));
  // What is asked: the action, the resource, and the model version among those the principal
  // may see (an invisible version answers 404 like a missing one). Takes the policy snapshot
  // the rest of the request is decided by.
  chain.push_back(std::make_unique<RouteStage>(parts.catalog, parts.policy, parts.default_alias));
  // Whether the policy allows it: 403, audited either way.
  chain.push_back(std::make_unique<AuthorizeStage>(parts.audit, parts.clock));
  // The Open Inference Protocol body into tensors, checked against the model's signature;
  // before admit, whose limits may count tensor elements.
  chain.push_back(std::make_unique<DecodeStage>());
  // Rate, concurrency and quota limits (429), held until the response for concurrency.
  chain.push_back(std::make_unique<AdmitStage>(parts.limiter, parts.fallback_limiter, parts.audit,
                                               &parts.metrics, parts.clock));
  // Prefer: respond-async: the request, checked and charged, is stored as a job and answered
  // 202; the job queue runs it through this chain later. Also answers GET /v2/jobs/{id}.
  chain.push_back(std::make_unique<JobStage>(parts.jobs, parts.audit, parts.clock));
  // Content safety for language models: personal data and secrets in prompts and answers
  // redacted or blocked as [guard] says (a stream screened chunk by chunk).
  chain.push_back(std::make_unique<GuardStage>(std::move(parts.guard), &parts.audit, &parts.metrics,
                                               parts.clock));
  // Runs the operation: inference (following the model's fallback chain when it cannot
  // answer), metadata, readiness, metrics, the admin plane.
  chain.push_back(std::make_unique<ExecuteStage>(
      std::move(parts.handlers),
      FallbackParts{.audit = &parts.audit,
                    .clock = &parts.clock,
                    .fallbacks = &parts.metrics.AddCounter(
                        "pillar_fallbacks_total",
                        "Inference requests answered by a model of the requested model's "
                        "fallback chain.",
                        {"model", "fallback"}),
                    .default_alias = parts.default_alias}));
  return chain;
}

}  // namespace pillar::stages
