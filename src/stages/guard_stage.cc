#include "stages/guard_stage.h"

#include <simdjson.h>

#include <map>

#include "common/strings.h"
#include "protocol/openai_response.h"
#include "protocol/openai_texts.h"
#include "stages/exchange_event.h"

namespace pillar::stages {
namespace {

// A streamed answer through the guard: each chunk's text per choice is screened with what came
// before it and not yet released, and only the part clear of the hold-back window goes out
// (guard::ScreenPrefix); a choice that finishes releases the rest. A block stops the producer and
// leaves the reason in the exchange, which ends the stream with it.
class GuardedEvents final : public runtime::EventSink {
 public:
  GuardedEvents(std::shared_ptr<runtime::EventSink> inner, pipeline::Exchange& ex,
                std::shared_ptr<const guard::GuardConfig> root, const guard::GuardConfig& config,
                const GuardStage& stage)
      : inner_(std::move(inner)), ex_(ex), root_(std::move(root)), config_(config), stage_(stage) {}

  void Event(runtime::EventKind kind, std::string event,
             absl::AnyInvocable<void(bool) &&> next) override {
    if (blocked_) return std::move(next)(false);
    if (kind != runtime::EventKind::kChunk) return Flush(kind, std::move(event), std::move(next));
    const std::string_view data = Data(event);
    last_chunk_ = std::string(data);
    absl::StatusOr<std::string> edited =
        protocol::EditChunkTexts(data, [this](int64_t index, std::string_view text, bool finished) {
          return Release(index, text, finished);
        });
    if (blocked_) return std::move(next)(false);
    if (!edited.ok()) return inner_->Event(kind, std::move(event), std::move(next));
    inner_->Event(kind, StrCat("data: ", *edited, "\n\n"), std::move(next));
  }

 private:
  static std::string_view Data(std::string_view event) {
    if (event.starts_with("data: ")) event.remove_prefix(6);
    while (!event.empty() && event.back() == '\n') event.remove_suffix(1);
    return event;
  }

  // What of choice `index`'s text may go out now.
  std::string Release(int64_t index, std::string_view text, bool finished) {
    std::string& held = held_[index];
    held.append(text);
    guard::PrefixResult r =
        guard::ScreenPrefix(held, config_, size_t(config_.hold_back_bytes), finished);
    stage_.Note(ex_, "answer", r.findings);
    if (r.blocked) {
      blocked_ = true;
      ex_.content_blocked = true;
      ex_.answer_blocked = absl::PermissionDeniedError(
          StrCat("the model's answer was blocked by the content guard: ", r.block_reason,
                 " of the streamed choice ", index));
      return std::string();
    }
    held.erase(0, r.consumed);
    return std::move(r.released);
  }

  // Before the usage chunk or [DONE]: what is still held of choices that never said they
  // finished goes out in a chunk of its own.
  void Flush(runtime::EventKind kind, std::string event, absl::AnyInvocable<void(bool) &&> next) {
    std::string flushed;
    for (auto& entry : held_) {
      const int64_t index = entry.first;
      if (entry.second.empty()) continue;
      std::string text = Release(index, "", true);
      if (blocked_) return std::move(next)(false);
      if (text.empty()) continue;
      absl::StatusOr<std::string> chunk =
          protocol::EditChunkTexts(last_chunk_, [&](int64_t i, std::string_view, bool) {
            return i == index ? std::move(text) : std::string();
          });
      if (chunk.ok()) flushed += StrCat("data: ", *chunk, "\n\n");
    }
    if (flushed.empty()) return inner_->Event(kind, std::move(event), std::move(next));
    inner_->Event(
        runtime::EventKind::kChunk, std::move(flushed),
        [inner = inner_, kind, event = std::move(event), next = std::move(next)](bool ok) mutable {
          if (!ok) return std::move(next)(false);
          inner->Event(kind, std::move(event), std::move(next));
        });
  }

  std::shared_ptr<runtime::EventSink> inner_;
  pipeline::Exchange& ex_;
  std::shared_ptr<const guard::GuardConfig> root_;  // keeps config_ alive
  const guard::GuardConfig& config_;
  const GuardStage& stage_;
  std::map<int64_t, std::string> held_;  // by choice index: text not yet released
  std::string last_chunk_;
  bool blocked_ = false;
};

}  // namespace

GuardStage::GuardStage(std::shared_ptr<const guard::GuardConfig> config, audit::AuditSink* audit,
                       monitor::MetricsRegistry* metrics, const Clock& clock)
    : config_(std::move(config)), audit_(audit), clock_(clock) {
  if (metrics != nullptr) {
    findings_ = &metrics->AddCounter(
        "pillar_guard_findings_total",
        "Personal data and secrets the content guard found in language models' prompts and "
        "answers, by what it did with them.",
        {"direction", "type", "action"});
  }
}

void GuardStage::Note(pipeline::Exchange& ex, std::string_view direction,
                      const std::vector<guard::ScreenedFinding>& findings) const {
  for (const guard::ScreenedFinding& f : findings) {
    const std::string_view type = guard::EntityName(f.finding.type);
    const std::string_view action = guard::ActionName(f.action);
    if (findings_ != nullptr) findings_->Get({direction, type, action}).Increment();
    if (ex.content_findings.size() < 4096) {
      StrAppend(&ex.content_findings, ex.content_findings.empty() ? "" : "; ", direction, " ", type,
                " ", action);
    }
  }
}

pipeline::StageResult GuardStage::OnRequest(pipeline::Exchange& ex) {
  if (config_ == nullptr || !pipeline::GeneratesText(ex.operation) || !ex.generate) {
    return pipeline::StageResult::kContinue;
  }
  const guard::GuardConfig& config = config_->For(ex.model->name, ex.principal->tenant);
  if (config.prompts) {
    std::string blocked;
    bool redacted = false;
    absl::StatusOr<std::string> body = protocol::EditRequestTexts(
        ex.generate->body,
        [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
          guard::ScreenResult r = guard::Screen(text, config);
          Note(ex, "prompt", r.findings);
          if (r.blocked && blocked.empty()) blocked = StrCat(r.block_reason, " of ", where);
          if (r.blocked || r.text == text) return std::nullopt;
          redacted = true;
          return std::move(r.text);
        });
    if (!body.ok()) {
      ex.Fail(body.status());
      return pipeline::StageResult::kStop;
    }
    if (!blocked.empty()) {
      ex.content_blocked = true;
      ex.Fail(absl::InvalidArgumentError(
          StrCat("the prompt was blocked by the content guard: ", blocked)));
      return pipeline::StageResult::kStop;
    }
    if (redacted) ex.generate->body = std::move(*body);
  }
  if (config.answers && ex.generate->stream) {
    ex.wrap_events = [&ex, root = config_, &config,
                      this](std::shared_ptr<runtime::EventSink> inner) {
      return std::make_shared<GuardedEvents>(std::move(inner), ex, root, config, *this);
    };
  }
  return pipeline::StageResult::kContinue;
}

void GuardStage::ScreenAnswer(pipeline::Exchange& ex, const guard::GuardConfig& config) const {
  std::string blocked;
  bool redacted = false;
  absl::StatusOr<std::string> body = protocol::EditAnswerTexts(
      ex.response.body,
      [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
        guard::ScreenResult r = guard::Screen(text, config);
        Note(ex, "answer", r.findings);
        if (r.blocked && blocked.empty()) blocked = StrCat(r.block_reason, " of ", where);
        if (r.blocked || r.text == text) return std::nullopt;
        redacted = true;
        return std::move(r.text);
      });
  if (!body.ok()) return;  // checked where it was read: not an answer this stage rewrites
  if (!blocked.empty()) {
    ex.content_blocked = true;
    ex.Fail(absl::PermissionDeniedError(
        StrCat("the model's answer was blocked by the content guard: ", blocked)));
    return;
  }
  if (redacted) ex.response.body = std::move(*body);
}

void GuardStage::OnResponse(pipeline::Exchange& ex) {
  if (config_ == nullptr || !pipeline::GeneratesText(ex.operation) || ex.model == nullptr ||
      ex.principal == nullptr) {
    return;
  }
  const guard::GuardConfig& config = config_->For(ex.model->name, ex.principal->tenant);
  if (config.answers && !ex.streaming && !ex.failed() &&
      ex.operation != pipeline::Operation::kEmbeddings) {
    ScreenAnswer(ex, config);
  }
  if (audit_ == nullptr || ex.content_findings.empty()) return;
  audit_->Record(ExchangeEvent(
      ex, audit::EventKind::kContent, !ex.content_blocked, [&] { return ex.content_findings; },
      clock_));
}

}  // namespace pillar::stages
