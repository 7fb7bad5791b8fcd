// Stage: decode. Parses an infer request's JSON body into tensors (Open Inference Protocol),
// after admission so that refused requests cost no parsing, and before the guards, which look
// at the decoded inputs. A bad body ends the request with 400 and a precise message.
#pragma once

#include "pipeline/stage.h"
#include "protocol/json_codec.h"

namespace pillar::stages {

class DecodeStage final : public pipeline::Stage {
 public:
  explicit DecodeStage(protocol::DecodeLimits limits = {}) : limits_(limits) {}
  std::string_view name() const override { return "decode"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  protocol::DecodeLimits limits_;
};

}  // namespace pillar::stages
