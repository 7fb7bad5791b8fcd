// Stage: route. Names what the request asks for (action and resource, for the policy) and
// resolves the model and version it addresses among those the principal may see: 404 for an
// unknown or invisible model or version (the same answer for both), 503 (with the load error)
// for a version that failed to load when the request needs it to run. A version in the path may
// be an alias ("prod"); a request without one goes to the default alias's version when the
// model has that alias and it is ready and visible, else to the highest such version. The
// registry snapshot is taken here, once, and kept by the request to its end. A model's fallback
// chain is followed by the execute stage, which resolves each fallback the same way
// (ResolveVersion). Canary and shadow routing (R-OPS-7) extend this stage later.
#pragma once

#include "pipeline/stage.h"
#include "policy/policy_source.h"
#include "protocol/openai_request.h"
#include "runtime/model_catalog.h"

namespace pillar::stages {

// The version of `model` a request for `wanted` (a number, an alias, or empty) goes to, among
// those ex.principal may see in ex.models, as the route stage decides: for an empty `wanted`,
// the `default_alias`'s version when it is ready and visible, else the highest visible ready
// version, else the highest visible one. `granted_by` gets the rule that grants ex.action on
// it (null when none does). Null when there is none.
const runtime::ModelVersion* ResolveVersion(const pipeline::Exchange& ex, std::string_view model,
                                            std::string_view wanted, std::string_view default_alias,
                                            const policy::Rule** granted_by);

class RouteStage final : public pipeline::Stage {
 public:
  RouteStage(const runtime::ModelCatalog& catalog, const policy::PolicySource& policy,
             std::string default_alias = "prod", protocol::OpenAiLimits openai_limits = {})
      : catalog_(catalog),
        policy_(policy),
        default_alias_(std::move(default_alias)),
        openai_limits_(openai_limits) {}
  std::string_view name() const override { return "route"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const runtime::ModelCatalog& catalog_;
  const policy::PolicySource& policy_;
  const std::string default_alias_;
  const protocol::OpenAiLimits openai_limits_;
};

}  // namespace pillar::stages
