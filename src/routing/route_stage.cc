#include "routing/route_stage.h"

#include "common/strings.h"
#include "routing/access.h"

namespace pillar::routing {

const runtime::ModelVersion* RouteStage::Resolve(pipeline::Exchange& ex) const {
  const runtime::ModelVersion* latest = nullptr;
  const runtime::ModelVersion* latest_ready = nullptr;
  const policy::Rule* latest_rule = nullptr;
  const policy::Rule* latest_ready_rule = nullptr;
  for (const auto& v : registry_.VersionsOf(ex.model_name)) {
    if (!ex.model_version.empty() && v->version_text != ex.model_version) continue;
    // Versions ascend: the last visible one wins, preferring ready ones.
    const Access access = AccessTo(ex, *v);
    if (!access.visible) continue;
    latest = v.get();
    latest_rule = access.granted_by;
    if (v->ready()) {
      latest_ready = v.get();
      latest_ready_rule = access.granted_by;
    }
  }
  // The decision on the chosen version is made here once; the authorize stage reuses it.
  ex.granted_by = latest_ready != nullptr ? latest_ready_rule : latest_rule;
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
                                          " is not ready: ", model->Reason())));
    return pipeline::StageResult::kStop;
  }
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::routing
