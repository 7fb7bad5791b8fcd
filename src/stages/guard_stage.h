// Stage: guard. Input guards run on the request half and output guards on the response half
// (R-SEC-10/11: PII redaction, rules, output limiting). They arrive in a later issue; the stage
// is in the chain and timed so that they slot in without changing the request path.
#pragma once

#include "pipeline/stage.h"

namespace pillar::stages {

class GuardStage final : public pipeline::Stage {
 public:
  std::string_view name() const override { return "guard"; }
  pipeline::StageResult OnRequest(pipeline::Exchange&) override {
    return pipeline::StageResult::kContinue;
  }
};

}  // namespace pillar::stages
