#include "routing/route_stage.h"

#include "common/strings.h"

namespace pillar::routing {

pipeline::StageResult RouteStage::OnRequest(pipeline::Exchange& ex) {
  if (!pipeline::TargetsModel(ex.operation)) return pipeline::StageResult::kContinue;
  const runtime::ModelVersion* model = registry_.Find(ex.model_name, ex.model_version);
  if (model == nullptr) {
    if (!registry_.HasModel(ex.model_name)) {
      ex.Fail(absl::NotFoundError(StrCat("unknown model '", ex.model_name, "'")));
    } else {
      ex.Fail(absl::NotFoundError(
          StrCat("unknown version '", ex.model_version, "' of model '", ex.model_name, "'")));
    }
    return pipeline::StageResult::kStop;
  }
  ex.model = model;
  if (ex.operation == pipeline::Operation::kInfer && !model->ready()) {
    ex.Fail(absl::UnavailableError(StrCat("model '", model->name, "' version ", model->version,
                                          " is not ready: ", model->status.message())));
    return pipeline::StageResult::kStop;
  }
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::routing
