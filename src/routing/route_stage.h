// Stage: route. Names what the request asks for (action and resource, for the policy) and
// resolves the model and version it addresses among those the principal may see: 404 for an
// unknown or invisible model or version (the same answer for both), 503 (with the load error)
// for a version that failed to load when the request needs it to run. Canary, shadow and
// fallback routing (R-OPS-7, R-REL-4) extend this stage later.
#pragma once

#include "pipeline/stage.h"
#include "policy/policy_source.h"
#include "runtime/model_registry.h"

namespace pillar::routing {

class RouteStage final : public pipeline::Stage {
 public:
  RouteStage(const runtime::ModelRegistry& registry, const policy::PolicySource& policy)
      : registry_(registry), policy_(policy) {}
  std::string_view name() const override { return "route"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const runtime::ModelVersion* Resolve(pipeline::Exchange& ex) const;

  const runtime::ModelRegistry& registry_;
  const policy::PolicySource& policy_;
};

}  // namespace pillar::routing
