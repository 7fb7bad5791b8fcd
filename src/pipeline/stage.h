// A stage is one control on the request path (authenticate, admit, execute ...). The chain
// calls OnRequest in order until a stage stops or the last one continues, then OnResponse in
// reverse order on every stage whose OnRequest ran, so a stage can undo or finish what it began
// (release a concurrency slot, filter an output, record metrics).
//
//   class AuthenticateStage final : public Stage {
//     StageResult OnRequest(Exchange& ex) override { ... return StageResult::kContinue; }
//   };
// Stages are shared by all requests and called from many threads: keep per-request state in
// the Exchange.
#pragma once

#include <string_view>

#include "pipeline/exchange.h"

namespace pillar::pipeline {

enum class StageResult {
  kContinue,  // go on to the next stage
  kStop,      // the exchange holds the final response (usually an error)
  kSuspend,   // the stage will call Chain::Resume later, from the exchange's executor
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string_view name() const = 0;
  virtual StageResult OnRequest(Exchange& ex) = 0;
  virtual void OnResponse(Exchange&) {}
  // Whether OnResponse does work worth timing apart. Every stage's OnResponse runs either way;
  // the chain reads the clock only after those that say so (most stages have none, and a clock
  // reading costs more than an empty call), and the time of the others counts to the next timed
  // one's.
  virtual bool TimesResponse() const { return false; }
};

}  // namespace pillar::pipeline
