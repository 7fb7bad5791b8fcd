// Stage: execute. For an infer request it hands the decoded tensors to the routed version's
// Runner and suspends the exchange until the result comes back (then encodes the protocol
// response on the connection's thread); a language model's call (chat completions, completions,
// embeddings) goes to the runner's Generate, whose answer is the OpenAI-compatible body. Every
// other operation is answered by a synchronous handler the application registers for it (metadata,
// readiness, metrics ...).
//
// Graceful degradation: when the version cannot answer (503: its breaker is open, its endpoints
// are out, it is overloaded; 502: it failed after its retries; 504 from its own timeout while
// the caller's deadline still has time), the models of its `fallback` list are tried in order.
// Each is resolved like a request that names no version, and must be ready and grant the caller
// `infer`: the decision is audited like any authorization, and a fallback the caller may not use
// is passed over, so nobody is answered by a model they may not see. The answer names the model
// and version that gave it (X-Pillar-Fallback, the access log's "fallback", and
// pillar_fallbacks_total); when no fallback answers, the caller gets the primary's error.
// Limits were charged to the primary by the admit stage; a fallback is not charged again.
//
// Priority classes: a request's class is what its caller asks in X-Pillar-Priority (high,
// normal, low), bounded by its credential's `priority` attribute (normal when unset): a caller
// may lower its class, never raise it. Queues refuse the lower class first (runtime/admission.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <variant>

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"
#include "runtime/admission.h"

namespace pillar::stages {

// What the execute stage needs to follow fallback chains.
struct FallbackParts {
  audit::AuditSink* audit = nullptr;  // null: fallbacks are not followed
  const Clock* clock = &SystemClock();
  monitor::Family<monitor::Counter>* fallbacks = nullptr;  // {model, fallback}
  std::string default_alias;
};

class ExecuteStage final : public pipeline::Stage {
 public:
  using Handler = std::function<void(pipeline::Exchange&)>;

  explicit ExecuteStage(std::map<pipeline::Operation, Handler> handlers,
                        FallbackParts fallback = {})
      : handlers_(std::move(handlers)), fallback_(std::move(fallback)) {}
  std::string_view name() const override { return "execute"; }
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;

  // The request's class: the caller's X-Pillar-Priority, bounded by its credential's `priority`
  // attribute (default normal); 400 for a header that names no class.
  [[nodiscard]] static absl::StatusOr<runtime::Priority> PriorityOf(const pipeline::Exchange& ex);

 private:
  // An inference or a language model's call.
  using Work = std::variant<protocol::InferenceRequest, runtime::GenerateRequest>;

  // Runs `work` on `version`; on a failure that allows it, moves on to the primary's fallback
  // list from index `next`. `primary_error` is the primary's failure, once it failed.
  void Run(pipeline::Exchange& ex, const runtime::ModelVersion& version, Work work, size_t next,
           absl::Status primary_error);
  // Whether `status` from a model lets the request go to a fallback.
  bool FallsBack(const pipeline::Exchange& ex, const absl::Status& status) const;
  // Gives `work` a cancellation that the client's going away cancels, when its runner can stop.
  static void WatchForTheClient(pipeline::Exchange& ex, const runtime::ModelVersion& version,
                                Work& work);
  // The next fallback from index `next` that is ready and that the caller may use (each decision
  // audited); `next` moves past it. Null when none is left.
  const runtime::ModelVersion* NextFallback(pipeline::Exchange& ex, size_t& next) const;
  void Answer(pipeline::Exchange& ex, const runtime::ModelVersion& version, std::string id,
              runtime::InferResult result);
  static void EndStreamWithError(pipeline::Exchange& ex, const absl::Status& status);

  std::map<pipeline::Operation, Handler> handlers_;
  FallbackParts fallback_;
};

}  // namespace pillar::stages
