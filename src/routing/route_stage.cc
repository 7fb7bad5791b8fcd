#include "routing/route_stage.h"

#include "common/strings.h"
#include "routing/access.h"

namespace pillar::routing {

const runtime::ModelVersion* RouteStage::Resolve(pipeline::Exchange& ex) const {
  const runtime::ModelVersion* latest = nullptr;
  const runtime::ModelVersion* latest_ready = nullptr;
  for (const auto& v : registry_.VersionsOf(ex.model_name)) {
    if (!ex.model_version.empty()) {
      if (v->version_text == ex.model_version) return Visible(ex, *v) ? v.get() : nullptr;
      continue;
    }
    // Versions ascend: the last visible one wins, preferring ready ones.
    if (!Visible(ex, *v)) continue;
    latest = v.get();
    if (v->ready()) latest_ready = v.get();
  }
  return latest_ready != nullptr ? latest_ready : latest;
}

pipeline::StageResult RouteStage::OnRequest(pipeline::Exchange& ex) {
  ex.policy = policy_.Current();
  ex.action = ActionOf(ex.operation);
  if (!pipeline::TargetsModel(ex.operation)) {
    ex.resource = ResourceOf(ex.operation);
    return pipeline::StageResult::kContinue;
  }
  const runtime::ModelVersion* model = Resolve(ex);
  if (model == nullptr) {
    bool model_visible = false;
    for (const auto& v : registry_.VersionsOf(ex.model_name)) {
      model_visible = model_visible || Visible(ex, *v);
    }
    if (!model_visible) {
      ex.Fail(absl::NotFoundError(StrCat("unknown model '", ex.model_name, "'")));
    } else {
      ex.Fail(absl::NotFoundError(
          StrCat("unknown version '", ex.model_version, "' of model '", ex.model_name, "'")));
    }
    return pipeline::StageResult::kStop;
  }
  ex.model = model;
  ex.resource = model->resource;
  if (ex.operation == pipeline::Operation::kInfer && !model->ready()) {
    ex.Fail(absl::UnavailableError(StrCat("model '", model->name, "' version ", model->version,
                                          " is not ready: ", model->status.message())));
    return pipeline::StageResult::kStop;
  }
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::routing
