#include "stages/decode_stage.h"

#include <memory>

#include "guard/screen.h"

namespace pillar::stages {

pipeline::StageResult DecodeStage::OnRequest(pipeline::Exchange& ex) {
  if (ex.operation != pipeline::Operation::kInfer) return pipeline::StageResult::kContinue;
  // One decoder per thread keeps simdjson's parse buffers warm across requests.
  thread_local std::unique_ptr<protocol::InferenceRequestDecoder> decoder;
  if (decoder == nullptr) decoder = std::make_unique<protocol::InferenceRequestDecoder>(limits_);
  absl::StatusOr<protocol::InferenceRequest> request = decoder->Decode(ex.body);
  if (!request.ok()) {
    ex.Fail(guard::RedactAll(request.status()));  // it may quote the request
    return pipeline::StageResult::kStop;
  }
  ex.infer_request = std::move(*request);
  return pipeline::StageResult::kContinue;
}

}  // namespace pillar::stages
