#include "stages/execute_stage.h"

#include "pipeline/chain.h"
#include "protocol/json_codec.h"

namespace pillar::stages {

using runtime::InferResult;

pipeline::StageResult ExecuteStage::OnRequest(pipeline::Exchange& ex) {
  if (ex.operation != pipeline::Operation::kInfer) {
    auto it = handlers_.find(ex.operation);
    if (it == handlers_.end()) {
      ex.Fail(absl::UnimplementedError("no handler for this operation"));
      return pipeline::StageResult::kStop;
    }
    it->second(ex);
    return ex.failed() ? pipeline::StageResult::kStop : pipeline::StageResult::kContinue;
  }
  protocol::InferenceRequest request = std::move(*ex.infer_request);
  ex.infer_request.reset();
  if (ex.timeout_ms > 0) request.deadline_ns = ex.start_ns + ex.timeout_ms * 1'000'000;
  std::string id = request.id;
  // Nothing below may touch `ex` after Infer(): the callback may already have resumed it.
  ex.model->runner->Infer(
      std::move(request), [&ex, id = std::move(id)](absl::StatusOr<InferResult> result) mutable {
        ex.post([&ex, id = std::move(id), result = std::move(result)]() mutable {
          if (!result.ok()) {
            ex.Fail(result.status());
            ex.chain().Resume(ex, pipeline::StageResult::kStop);
            return;
          }
          protocol::InferenceResponse response;
          response.model_name = ex.model->name;
          response.model_version = ex.model->version_text;
          response.id = std::move(id);
          response.outputs = std::move(result->outputs);
          ex.response.body = protocol::EncodeInferenceResponse(response);
          ex.infer_result.queue_ns = result->queue_ns;
          ex.infer_result.compute_ns = result->compute_ns;
          ex.infer_result.batch_size = result->batch_size;
          ex.chain().Resume(ex, pipeline::StageResult::kContinue);
        });
      });
  return pipeline::StageResult::kSuspend;
}

}  // namespace pillar::stages
