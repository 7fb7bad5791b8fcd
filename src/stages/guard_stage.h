// Stage: guard. Content safety for the calls to language models (guard/, docs/guard.md), in both
// directions, as [guard] configures it per model and tenant:
// - the prompt (each message's text, each prompt or input) is screened before the call: a
//   block answers 400 naming the entity type and where it is, never the value; redactions
//   rewrite the body the model gets;
// - the answer is screened after it: a block withholds it (403); redactions rewrite it. A
//   streamed answer goes through GuardEvents (guarded_events.h), which lets out only what it
//   saw whole; a block ends the stream with an error event.
// The same screening covers the BYTES tensors of the inference routes (POST /v2/.../infer): each
// element of a BYTES input is screened as a prompt (400 on a block), each element of a BYTES
// output as an answer (403), wherever the model runs.
// Every finding is counted (pillar_guard_findings_total{direction,type,action}) and every call
// with one audited (kind "content"), with types and offsets, never the text.
#pragma once

#include <memory>

#include "audit/audit_sink.h"
#include "common/clock.h"
#include "guard/guard_config.h"
#include "guard/screen.h"
#include "monitor/metrics.h"
#include "pipeline/stage.h"

namespace pillar::stages {

class GuardStage final : public pipeline::Stage {
 public:
  // `config` null: nothing is screened (no [guard] section).
  GuardStage(std::shared_ptr<const guard::GuardConfig> config, audit::AuditSink* audit,
             monitor::MetricsRegistry* metrics, const Clock& clock);
  std::string_view name() const override { return "guard"; }
  // What users and tools wrote in a call, with where: ("messages[1]", text).
  using UserTextList = std::vector<std::pair<std::string, std::string>>;
  pipeline::StageResult OnRequest(pipeline::Exchange& ex) override;
  void OnResponse(pipeline::Exchange& ex) override;
  bool TimesResponse() const override { return true; }

  // Counts `findings` and deny rules' matches of one direction ("prompt", "answer") and notes
  // them for the call's audit record; a rule's matches as the type "deny:NAME".
  void Note(pipeline::Exchange& ex, std::string_view direction,
            const std::vector<guard::ScreenedFinding>& findings,
            const std::vector<guard::DenyMatch>& denied) const;

 private:
  // The inference routes: BYTES inputs screened now, BYTES outputs when the answer comes
  // (through ex.screen_outputs).
  pipeline::StageResult ScreenTensors(pipeline::Exchange& ex) const;
  void ScreenAnswer(pipeline::Exchange& ex, const guard::GuardConfig& config) const;
  // A failed call's message can quote the model's or its server's own words (a remote server's
  // error, a name from its reply): it is held to the deny rules too (a recognizer's values in it
  // were tagged already, guard::RedactAll); a block withholds it, its status kept. A client
  // prints it: it loses its display controls as an answer does (answer_controls).
  void ScreenError(pipeline::Exchange& ex, const guard::GuardConfig& config) const;
  // The prompt's texts screened (redacted in ex.generate->body, or blocked); false (and the
  // exchange failed) when they are blocked.
  bool ScreenPrompt(pipeline::Exchange& ex, const guard::GuardConfig& config) const;
  // A value found in a message's text parts joined (as servers join them) once each was
  // screened alone: one split across two parts (review helper-117, a card as "4111 1111" and
  // "1111 1111"). Counted and audited as blocked; the reason, or empty when none.
  std::string SplitAcrossParts(pipeline::Exchange& ex, std::string_view body,
                               const guard::GuardConfig& config) const;
  // The prompt-injection heuristics over what the call's users and tools wrote; false (and the
  // exchange failed) when they block it.
  bool ScreenInjection(pipeline::Exchange& ex, const guard::GuardConfig& config,
                       const UserTextList& texts) const;
  void Count(pipeline::Exchange& ex, std::string_view direction, std::string_view type,
             std::string_view action) const;
  // The classifier hook: asks its model about what users and tools wrote (suspending the
  // chain), then lets the call go on, or fails it (403 on a blocking verdict; 503 when the
  // classifier cannot answer, unless on_error = "allow").
  pipeline::StageResult Classify(pipeline::Exchange& ex, const guard::GuardConfig& config,
                                 const std::string& prompt);
  // The same for the model's whole answer (judge = ["answers"]), with the prompt as its
  // context, from the execute stage (Exchange::judge_answer); `done` hears whether it goes on.
  void JudgeAnswer(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                   const std::string& prompt, absl::AnyInvocable<void(bool) &&> done) const;

 public:
  using Messages = std::vector<std::pair<std::string, std::string>>;  // (role, text)

 private:
  void AskClassifier(pipeline::Exchange& ex, const runtime::ModelVersion& version,
                     const guard::ClassifierConfig& classifier, std::string_view direction,
                     const Messages& messages, absl::AnyInvocable<void(bool) &&> then) const;
  // A verdict, or why there is none, for `direction` ("prompt", "answer"): whether the call
  // goes on.
  bool OnVerdict(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                 std::string_view direction, absl::StatusOr<runtime::InferResult> result) const;
  bool ClassifierFailed(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                        std::string_view direction, const absl::Status& why) const;

  std::shared_ptr<const guard::GuardConfig> config_;
  audit::AuditSink* audit_;
  monitor::Family<monitor::Counter>* findings_ = nullptr;
  const Clock& clock_;
};

}  // namespace pillar::stages
