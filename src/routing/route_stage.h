// Stage: route. Resolves the model and version a request names to a loaded ModelVersion:
// 404 for an unknown model or version, 503 (with the load error) for a version that failed to
// load when the request needs it to run. Canary, shadow and fallback routing (R-OPS-7, R-REL-4)
// extend this stage later.
#pragma once

#include "pipeline/stage.h"
#include "runtime/model_registry.h"

namespace pillar::routing {

class RouteStage final : public pipeline::Stage {
 public:
  explicit RouteStage(const runtime::ModelRegistry& registry) : registry_(registry) {}
  std::string_view name() const override { return "route"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  const runtime::ModelRegistry& registry_;
};

}  // namespace pillar::routing
