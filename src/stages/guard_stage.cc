#include "stages/guard_stage.h"

#include <simdjson.h>

#include <cstdio>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "guard/display_controls.h"
#include "pipeline/chain.h"
#include "protocol/openai_request.h"
#include "protocol/openai_response.h"
#include "protocol/openai_texts.h"
#include "protocol/token_estimate.h"
#include "runtime/model_registry.h"
#include "runtime/runner.h"
#include "stages/exchange_event.h"
#include "stages/guarded_events.h"
#include "stages/whole_answer.h"

namespace pillar::stages {

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

void GuardStage::Count(pipeline::Exchange& ex, std::string_view direction, std::string_view type,
                       std::string_view action) const {
  if (findings_ != nullptr) findings_->Get({direction, type, action}).Increment();
  if (ex.content_findings.size() < 4096) {
    StrAppend(&ex.content_findings, ex.content_findings.empty() ? "" : "; ", direction, " ", type,
              " ", action);
  }
}

void GuardStage::Note(pipeline::Exchange& ex, std::string_view direction,
                      const std::vector<guard::ScreenedFinding>& findings,
                      const std::vector<guard::DenyMatch>& denied) const {
  for (const guard::ScreenedFinding& f : findings) {
    Count(ex, direction, guard::EntityName(f.finding.type), guard::ActionName(f.action));
  }
  for (const guard::DenyMatch& m : denied) {
    Count(ex, direction, StrCat("deny:", m.rule->name), guard::DenyActionName(m.rule->action));
  }
}

namespace {

std::string FormatScore(double score) {
  char text[16];
  std::snprintf(text, sizeof text, "%.2f", score);
  return text;
}

// What a call's prompt says, with where: what the injection heuristics and the classifier
// judge. Every string a model may read (protocol::EditRequestTexts, but attachments),
// joined by the message, prompt or member it is in ("messages[1]", "tools[0]", "suffix"), so
// that a sign split across a message's parts is seen whole. Every role's: the caller writes the
// system and developer messages and the model's earlier turns too (a forged assistant turn or
// tool call is an injection like any other), and tool descriptions and schemas reach the
// model's prompt through its chat template. Embeddings' inputs are not instructions.
GuardStage::UserTextList UserTexts(const runtime::GenerateRequest& call) {
  GuardStage::UserTextList texts;
  if (call.route == runtime::OpenAiRoute::kEmbeddings) return texts;
  protocol::ForEachRequestText(call.body, [&](std::string_view where, std::string_view text) {
    // An attachment is read for the text it holds, if it holds text (a text file).
    std::string attached;
    if (protocol::IsAttachment(where)) {
      attached = guard::AttachmentText(text);
      text = attached;
    }
    if (text.empty()) return;
    // The message, prompt or member: up to the first index if it comes before the first '.'.
    const size_t dot = where.find('.'), close = where.find(']');
    const std::string_view place = close != std::string_view::npos && close < dot
                                       ? where.substr(0, close + 1)
                                       : where.substr(0, dot);
    if (texts.empty() || texts.back().first != place) {
      texts.emplace_back(std::string(place), std::string(text));
    } else {
      StrAppend(&texts.back().second, "\n", text);
    }
  });
  return texts;
}

// The classifier's version: the newest ready version of its model that is a language model.
const runtime::ModelVersion* ClassifierVersion(const runtime::ModelRegistry& models,
                                               std::string_view name) {
  const auto versions = models.VersionsOf(name);
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    const runtime::ModelVersion& v = **it;
    if (v.ready() && v.config && v.config->speaks_openai()) return &v;
  }
  return nullptr;
}

// The text of a chat completion's first choice; empty when there is none.
std::string FirstChoiceText(std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS) return "";
  std::string_view content;
  if (doc["choices"].at(0)["message"]["content"].get(content) != simdjson::SUCCESS) return "";
  return std::string(content);
}

}  // namespace

bool GuardStage::ScreenInjection(pipeline::Exchange& ex, const guard::GuardConfig& config,
                                 const UserTextList& texts) const {
  if (!config.injection.enabled) return true;
  for (const auto& [where, text] : texts) {
    const guard::InjectionScore s = guard::ScoreInjection(text);
    if (s.score < config.injection.threshold) continue;
    Count(ex, "prompt", "PROMPT_INJECTION", guard::DenyActionName(config.injection.action));
    if (config.injection.action != guard::DenyAction::kBlock) continue;
    std::string signals;
    for (std::string_view signal : s.signals)
      StrAppend(&signals, signals.empty() ? "" : ", ", signal);
    ex.content_blocked = true;
    ex.Fail(absl::InvalidArgumentError(
        StrCat("the prompt was blocked by the content guard: PROMPT_INJECTION (score ",
               FormatScore(s.score), ": ", signals, ") in ", where)));
    return false;
  }
  return true;
}

namespace {

bool HasBytes(const std::vector<protocol::Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const protocol::Tensor& t) {
    return t.datatype == protocol::DataType::kBytes;
  });
}

bool DeclaresBytes(const models::ModelConfig& config) {
  return std::any_of(config.outputs.begin(), config.outputs.end(), [](const models::TensorSpec& s) {
    return s.datatype == protocol::DataType::kBytes;
  });
}

// Screens every element of the BYTES tensors in `tensors` ("input" or "output" says which),
// rewriting those with redactions; `note` hears each element's result. The first block's reason
// ("EMAIL_ADDRESS at bytes 3-20 of element 2 of input 'text'"), or empty when none blocks.
std::string ScreenElements(std::vector<protocol::Tensor>& tensors, const guard::GuardConfig& config,
                           std::string_view what,
                           absl::FunctionRef<void(const guard::ScreenResult&)> note) {
  for (protocol::Tensor& t : tensors) {
    if (t.datatype != protocol::DataType::kBytes) continue;
    std::string screened, blocked;
    bool redacted = false;
    int64_t index = 0;
    // Whole by construction (the decoder and the runners' checks): nothing is skipped unseen.
    (void)protocol::ForEachBytesElement(t.data, [&](std::string_view element) {
      guard::ScreenResult r = guard::Screen(element, config);
      note(r);
      if (r.blocked) {
        blocked =
            StrCat(r.block_reason, " of element ", index, " of ", what, " ", Quoted(t.name, 64));
        return false;
      }
      redacted = redacted || r.text != element;
      protocol::AppendBytesElement(screened, r.text);
      ++index;
      return true;
    });
    if (!blocked.empty()) return blocked;
    if (redacted) t.data = std::move(screened);
  }
  return std::string();
}

}  // namespace

pipeline::StageResult GuardStage::ScreenTensors(pipeline::Exchange& ex) const {
  const bool bytes_in = HasBytes(ex.infer_request->inputs);
  // A fallback may answer with BYTES the primary does not declare: its answer is screened too.
  const bool bytes_out =
      ex.model->config && (DeclaresBytes(*ex.model->config) || !ex.model->config->fallback.empty());
  if (!bytes_in && !bytes_out) return pipeline::StageResult::kContinue;
  const guard::GuardConfig& config = config_->For(ex.model->name, ex.principal->tenant);
  ex.fallback_screened_alike = [root = config_, used = &config,
                                tenant = ex.principal->tenant](const runtime::ModelVersion& v) {
    return &root->For(v.name, tenant) == used;
  };
  if (config.prompts && bytes_in) {
    const std::string blocked = ScreenElements(
        ex.infer_request->inputs, config, "input",
        [&](const guard::ScreenResult& r) { Note(ex, "prompt", r.findings, r.denied); });
    if (!blocked.empty()) {
      ex.content_blocked = true;
      ex.Fail(absl::InvalidArgumentError(
          StrCat("the input was blocked by the content guard: ", blocked)));
      return pipeline::StageResult::kStop;
    }
  }
  if (config.answers) {
    ex.screen_outputs = [this, &ex, root = config_,
                         &config](std::vector<protocol::Tensor>& outputs) {
      const std::string blocked = ScreenElements(
          outputs, config, "output",
          [&](const guard::ScreenResult& r) { Note(ex, "answer", r.findings, r.denied); });
      if (blocked.empty()) return absl::OkStatus();
      ex.content_blocked = true;
      return absl::PermissionDeniedError(
          StrCat("the model's answer was blocked by the content guard: ", blocked));
    };
  }
  return pipeline::StageResult::kContinue;
}

pipeline::StageResult GuardStage::OnRequest(pipeline::Exchange& ex) {
  if (config_ == nullptr || ex.model == nullptr || ex.principal == nullptr) {
    return pipeline::StageResult::kContinue;
  }
  if (ex.operation == pipeline::Operation::kInfer && ex.infer_request) return ScreenTensors(ex);
  if (!pipeline::GeneratesText(ex.operation) || !ex.generate) {
    return pipeline::StageResult::kContinue;
  }
  const guard::GuardConfig& config = config_->For(ex.model->name, ex.principal->tenant);
  if (config.answers && ex.generate->stream && ex.choices_asked > 1) {
    // Each choice's text can be screened as it streams, but not every way a client joins them:
    // chunks of several choices printed in turn, each chunk's first or last choice, each choice
    // gathered and then printed back to back (reviews helper-72 and helper-73 showed a key split
    // across choices shown whole by each). A whole answer's choices are screened joined.
    ex.Fail(absl::InvalidArgumentError(
        "more than one choice (n > 1, or a list of prompts) cannot be streamed through the "
        "content guard (a client may join the choices' texts in ways no screen of the stream "
        "can follow): ask for one, or for the answer whole"));
    return pipeline::StageResult::kStop;
  }
  ex.fallback_screened_alike = [root = config_, used = &config,
                                tenant = ex.principal->tenant](const runtime::ModelVersion& v) {
    return &root->For(v.name, tenant) == used;
  };
  if (config.prompts && !ScreenPrompt(ex, config)) return pipeline::StageResult::kStop;
  // What users and tools wrote, read once for the injection heuristics and the classifier.
  const guard::ClassifierConfig& classifier = config.classifier;
  const bool judge_prompt = config.prompts && classifier.enabled() && classifier.judge_prompts;
  const bool judge_answer = config.answers && classifier.enabled() && classifier.judge_answers &&
                            !ex.generate->stream &&
                            ex.operation != pipeline::Operation::kEmbeddings;
  UserTextList texts;
  if ((config.prompts && config.injection.enabled) || judge_prompt || judge_answer) {
    texts = UserTexts(*ex.generate);
  }
  if (config.prompts && !ScreenInjection(ex, config, texts)) return pipeline::StageResult::kStop;
  std::string prompt;
  for (const auto& [where, text] : texts) {
    StrAppend(&prompt, prompt.empty() ? "" : "\n\n", text);
  }
  if (judge_answer) {
    ex.judge_answer = [this, &ex, root = config_, &classifier,
                       prompt](absl::AnyInvocable<void(bool) &&> done) mutable {
      JudgeAnswer(ex, classifier, prompt, std::move(done));
    };
  }
  if (config.answers && ex.generate->stream) {
    ex.wrap_events = [&ex, root = config_, &config, this,
                      choices = ex.choices_asked](std::shared_ptr<runtime::EventSink> inner) {
      return GuardEvents(std::move(inner), ex, root, config, *this, choices);
    };
  }
  if (judge_prompt) return Classify(ex, config, prompt);
  return pipeline::StageResult::kContinue;
}

namespace {

// The classifier's call: `messages` (role, text) as a chat completion of its model.
runtime::GenerateRequest ClassifierCall(const guard::ClassifierConfig& classifier,
                                        const GuardStage::Messages& messages, int64_t deadline_ns) {
  size_t size = 128;
  for (const auto& [role, text] : messages) size += text.size() + 32;
  JsonWriter w(size);
  w.BeginObject();
  w.Key("model");
  w.String(classifier.model);
  w.Key("max_tokens");
  w.Int(classifier.max_tokens);
  w.Key("messages");
  w.BeginArray();
  int64_t tokens = 0;
  for (const auto& [role, text] : messages) {
    w.BeginObject();
    w.Key("role");
    w.String(role);
    w.Key("content");
    w.String(text);
    w.EndObject();
    tokens += protocol::EstimateTokens(text);
  }
  w.EndArray();
  w.EndObject();
  runtime::GenerateRequest call;
  call.route = runtime::OpenAiRoute::kChatCompletions;
  call.body = std::move(w).Take();
  call.model = classifier.model;
  call.max_tokens = classifier.max_tokens;
  call.prompt_tokens = tokens;
  call.deadline_ns = deadline_ns;
  return call;
}

// Every text of an answer's choices (contents, refusals, tool call arguments), joined.
std::string AnswerTexts(std::string_view body) {
  std::string joined;
  protocol::ForEachChoiceText(body, [&](std::string_view text) {
    if (!text.empty()) StrAppend(&joined, joined.empty() ? "" : "\n\n", text);
  });
  return joined;
}

}  // namespace

pipeline::StageResult GuardStage::Classify(pipeline::Exchange& ex, const guard::GuardConfig& config,
                                           const std::string& prompt) {
  const guard::ClassifierConfig& classifier = config.classifier;
  if (prompt.empty()) return pipeline::StageResult::kContinue;
  const runtime::ModelVersion* version =
      ex.models == nullptr ? nullptr : ClassifierVersion(*ex.models, classifier.model);
  if (version == nullptr) {
    const bool go_on = ClassifierFailed(
        ex, classifier, "prompt",
        absl::UnavailableError(StrCat("model '", classifier.model, "' is not ready")));
    return go_on ? pipeline::StageResult::kContinue : pipeline::StageResult::kStop;
  }
  AskClassifier(ex, *version, classifier, "prompt", {{"user", prompt}}, [&ex](bool go_on) {
    ex.chain().Resume(ex, go_on ? pipeline::StageResult::kContinue : pipeline::StageResult::kStop);
  });
  return pipeline::StageResult::kSuspend;
}

void GuardStage::JudgeAnswer(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                             const std::string& prompt,
                             absl::AnyInvocable<void(bool) &&> done) const {
  std::string answer = AnswerTexts(ex.response.body);
  if (answer.empty()) return std::move(done)(true);
  const runtime::ModelVersion* version =
      ex.models == nullptr ? nullptr : ClassifierVersion(*ex.models, classifier.model);
  if (version == nullptr) {
    return std::move(done)(ClassifierFailed(
        ex, classifier, "answer",
        absl::UnavailableError(StrCat("model '", classifier.model, "' is not ready"))));
  }
  // The prompt as the answer's context, as Llama Guard judges a response.
  AskClassifier(ex, *version, classifier, "answer",
                {{"user", prompt}, {"assistant", std::move(answer)}}, std::move(done));
}

void GuardStage::AskClassifier(pipeline::Exchange& ex, const runtime::ModelVersion& version,
                               const guard::ClassifierConfig& classifier,
                               std::string_view direction, const Messages& messages,
                               absl::AnyInvocable<void(bool) &&> then) const {
  const int64_t deadline_ns = ex.timeout_ms > 0 ? ex.start_ns + ex.timeout_ms * 1'000'000 : 0;
  // Nothing below may touch `ex` after Generate(): the callback may already have resumed it.
  version.runner->Generate(
      ClassifierCall(classifier, messages, deadline_ns),
      [this, &ex, &classifier, direction,
       then = std::move(then)](absl::StatusOr<runtime::InferResult> result) mutable {
        ex.post([this, &ex, &classifier, direction, then = std::move(then),
                 result = std::move(result)]() mutable {
          std::move(then)(OnVerdict(ex, classifier, direction, std::move(result)));
        });
      });
}

bool GuardStage::OnVerdict(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                           std::string_view direction,
                           absl::StatusOr<runtime::InferResult> result) const {
  if (!result.ok()) return ClassifierFailed(ex, classifier, direction, result.status());
  absl::StatusOr<guard::ClassifierVerdict> verdict =
      guard::ParseClassifierVerdict(FirstChoiceText(result->body));
  if (!verdict.ok()) return ClassifierFailed(ex, classifier, direction, verdict.status());
  if (verdict->safe) return true;
  const std::vector<std::string> blocking = guard::Blocking(classifier, *verdict);
  // Counted by verdict, not by category: the categories are the classifier's words, and a
  // metric's labels must stay few.
  Count(ex, direction, "CLASSIFIER", blocking.empty() ? "flag" : "block");
  for (const std::string& category : verdict->categories) {
    if (ex.content_findings.size() < 4096) {
      StrAppend(&ex.content_findings, "; ", direction, " classifier:", category);
    }
  }
  if (blocking.empty()) return true;
  std::string named;
  for (const std::string& c : blocking) StrAppend(&named, named.empty() ? "" : ", ", c);
  ex.content_blocked = true;
  ex.Fail(absl::PermissionDeniedError(
      StrCat(direction == "prompt" ? "the prompt" : "the model's answer",
             " was blocked by the content classifier: ", named)));
  return false;
}

bool GuardStage::ClassifierFailed(pipeline::Exchange& ex, const guard::ClassifierConfig& classifier,
                                  std::string_view direction, const absl::Status& why) const {
  Count(ex, direction, "CLASSIFIER", "error");
  if (classifier.allow_on_error) return true;
  ex.Fail(absl::UnavailableError(
      StrCat("the content classifier cannot judge the ", direction, " now: ", why.message())));
  return false;
}

void GuardStage::ScreenAnswer(pipeline::Exchange& ex, const guard::GuardConfig& config) const {
  if (std::string why = AnswerShapeError(ex.response.body, ex.choices_asked); !why.empty()) {
    ex.Fail(runtime::BadGateway(std::move(why)));
    return;
  }
  std::string blocked;
  absl::StatusOr<std::string> body = protocol::EditAnswerTexts(
      ex.response.body,
      [&](std::string_view where, std::string_view text) -> std::optional<std::string> {
        // As shown: without its display controls, unless the configuration keeps them, and if
        // it is JSON without their escapes (ShownParsed).
        std::string storage;
        std::string parsed_storage;
        const std::string_view sent = text;
        if (config.strip_answer_controls) text = guard::WithoutDisplayControls(text, storage);
        text = ShownParsed(text, parsed_storage, config);
        guard::ScreenResult r = guard::Screen(text, config);
        Note(ex, "answer", r.findings, r.denied);
        // `where` holds member names the upstream chose: they may carry values too.
        if (r.blocked && blocked.empty()) {
          blocked = StrCat(r.block_reason, " of ", guard::RedactAll(where));
        }
        // A value spelled with JSON escapes, which a client that parses the text decodes
        // (structured outputs, tool arguments: review helper-83).
        if (!r.blocked && blocked.empty()) {
          if (std::string decoded = DecodedFinding(text, config); !decoded.empty()) {
            blocked = StrCat(decoded, " in ", guard::RedactAll(where));
          }
        }
        if (r.blocked || r.text == sent) return std::nullopt;
        return std::move(r.text);
      });
  if (!body.ok()) {  // nothing the guard cannot read goes out
    ex.Fail(runtime::BadGateway(
        StrCat("the model's answer cannot be screened: ", body.status().message())));
    return;
  }
  if (blocked.empty()) {
    absl::StatusOr<std::string> across = AcrossTexts(*body, config);
    if (!across.ok()) {
      ex.Fail(across.status());
      return;
    }
    blocked = std::move(*across);
  }
  if (!blocked.empty()) {
    ex.content_blocked = true;
    ex.Fail(absl::PermissionDeniedError(
        StrCat("the model's answer was blocked by the content guard: ", blocked)));
    return;
  }
  // Always the edited answer, redacted or not: its log probabilities are withheld.
  ex.response.body = std::move(*body);
}

void GuardStage::ScreenError(pipeline::Exchange& ex, const guard::GuardConfig& config) const {
  if (ex.error.empty()) return;
  // A client prints an error's message too, and it may quote the upstream's.
  if (config.strip_answer_controls && guard::HasDisplayControls(ex.error)) {
    ex.ReplaceError(guard::WithoutDisplayControls(ex.error));
  }
  if (config.deny == nullptr) return;
  const std::vector<guard::DenyMatch> denied = config.deny->Match(ex.error);
  if (denied.empty()) return;
  Note(ex, "answer", {}, denied);
  for (const guard::DenyMatch& m : denied) {
    if (m.rule->action != guard::DenyAction::kBlock) continue;
    ex.content_blocked = true;
    ex.ReplaceError(StrCat("the model's error was withheld by the content guard: deny rule '",
                           m.rule->name, "'"));
    return;
  }
}

void GuardStage::OnResponse(pipeline::Exchange& ex) {
  if (config_ == nullptr || ex.model == nullptr || ex.principal == nullptr) return;
  const bool text = pipeline::GeneratesText(ex.operation);
  if (!text && ex.operation != pipeline::Operation::kInfer) return;
  const guard::GuardConfig& config = config_->For(ex.model->name, ex.principal->tenant);
  if (config.answers && ex.failed()) {
    ScreenError(ex, config);
  } else if (config.answers && text && !ex.streaming) {  // embeddings' answers too
    ScreenAnswer(ex, config);
  }
  if (audit_ == nullptr || ex.content_findings.empty()) return;
  audit_->Record(ExchangeEvent(
      ex, audit::EventKind::kContent, !ex.content_blocked, [&] { return ex.content_findings; },
      clock_));
}

}  // namespace pillar::stages
