// The request path in one place: the stages every request on the data and admin planes runs
// through, in order. Read request_chain.cc top to bottom to follow a request; each stage's own
// file, named after it, says what it decides.
//
//   std::vector<std::unique_ptr<pipeline::Stage>> stages = RequestStages(parts);
//   pipeline::Chain chain(std::move(stages), &metrics);
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "guard/guard_config.h"
#include "identity/authenticator.h"
#include "jobs/job_queue.h"
#include "limits/limiter.h"
#include "monitor/access_log.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"
#include "policy/policy_source.h"
#include "runtime/model_catalog.h"
#include "stages/execute_stage.h"

namespace pillar::stages {

// What the stages use; every reference must outlive the chain.
struct ChainParts {
  monitor::MetricsRegistry& metrics;
  monitor::AccessLog& access_log;
  const identity::Authenticator& authenticator;
  audit::AuditSink& audit;
  const runtime::ModelCatalog& catalog;
  const policy::PolicySource& policy;
  // The alias a request that names no version is routed to ([routing] default_alias).
  std::string default_alias;
  limits::Limiter& limiter;
  limits::Limiter* fallback_limiter;  // null: the admit stage fails closed
  // What the execute stage runs for each operation.
  std::map<pipeline::Operation, ExecuteStage::Handler> handlers;
  // Times requests, decides expiry and stamps audit events (tests: testing::FakeClock).
  Clock& clock = SystemClock();
  // Where Prefer: respond-async requests become jobs; null: they run synchronously.
  jobs::JobQueue* jobs = nullptr;
  // [guard]: content safety for language models' calls; null: none.
  std::shared_ptr<const guard::GuardConfig> guard;
};

std::vector<std::unique_ptr<pipeline::Stage>> RequestStages(ChainParts parts);

}  // namespace pillar::stages
