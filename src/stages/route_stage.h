// Stage: route. Names what the request asks for (action and resource, for the policy) and
// resolves the model and version it addresses among those the principal may see: 404 for an
// unknown or invisible model or version (the same answer for both), 503 (with the load error)
// for a version that failed to load when the request needs it to run. A version in the path may
// be an alias ("prod"); a request without one goes to the default alias's version when the
// model has that alias and it is ready and visible, else to the highest such version. The
// registry snapshot is taken here, once, and kept by the request to its end. Canary, shadow and
// fallback routing (R-OPS-7, R-REL-4) extend this stage later.
#pragma once

#include "pipeline/stage.h"
#include "policy/policy_source.h"
#include "runtime/model_catalog.h"

namespace pillar::stages {

class RouteStage final : public pipeline::Stage {
 public:
  RouteStage(const runtime::ModelCatalog& catalog, const policy::PolicySource& policy,
             std::string default_alias = "prod")
      : catalog_(catalog), policy_(policy), default_alias_(std::move(default_alias)) {}
  std::string_view name() const override { return "route"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const runtime::ModelVersion* Resolve(pipeline::Exchange& ex) const;

  const runtime::ModelCatalog& catalog_;
  const policy::PolicySource& policy_;
  const std::string default_alias_;
};

}  // namespace pillar::stages
