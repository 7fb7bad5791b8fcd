// Stage: authorize. Every authenticated key may call every route until roles and ABAC policy
// arrive (R-SEC-5, next issue); the stage exists so that they slot in here, already timed. It
// still refuses an exchange that reached it without a principal, so a wiring mistake fails
// closed.
#pragma once

#include "pipeline/stage.h"

namespace pillar::identity {

class AuthorizeStage final : public pipeline::Stage {
 public:
  std::string_view name() const override { return "authorize"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override {
    if (!ex.principal.has_value()) {
      ex.Fail(absl::UnauthenticatedError("no authenticated principal"));
      return pipeline::StageResult::kStop;
    }
    return pipeline::StageResult::kContinue;
  }
};

}  // namespace pillar::identity
