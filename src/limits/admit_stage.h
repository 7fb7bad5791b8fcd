// Stage: admit. Rate limits, quotas, bulkheads and load shedding (R-SEC-8, R-REL-6/7) come in
// the next issue; today admission is decided by each model's bounded queue (503 + Retry-After)
// and this stage passes every request on, timed, so the chain is complete.
#pragma once

#include "pipeline/stage.h"

namespace pillar::limits {

class AdmitStage final : public pipeline::Stage {
 public:
  std::string_view name() const override { return "admit"; }
  pipeline::StageResult OnRequest(pipeline::Exchange&) override {
    return pipeline::StageResult::kContinue;
  }
};

}  // namespace pillar::limits
