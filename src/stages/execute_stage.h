// Stage: execute. For an infer request it hands the decoded tensors to the routed version's
// Runner and suspends the exchange until the result comes back (then encodes the protocol
// response on the connection's thread). Every other operation is answered by a synchronous
// handler the application registers for it (metadata, readiness, metrics ...).
#pragma once

#include <functional>
#include <map>

#include "pipeline/stage.h"

namespace pillar::stages {

class ExecuteStage final : public pipeline::Stage {
 public:
  using Handler = std::function<void(pipeline::Exchange&)>;

  explicit ExecuteStage(std::map<pipeline::Operation, Handler> handlers)
      : handlers_(std::move(handlers)) {}
  std::string_view name() const override { return "execute"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

 private:
  std::map<pipeline::Operation, Handler> handlers_;
};

}  // namespace pillar::stages
