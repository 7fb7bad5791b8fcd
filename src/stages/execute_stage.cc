#include "stages/execute_stage.h"

#include <algorithm>
#include <memory>
#include <variant>

#include "common/cancellation.h"
#include "common/strings.h"
#include "common/wait_meter.h"
#include "guard/screen.h"
#include "pipeline/chain.h"
#include "policy/policy.h"
#include "protocol/json_codec.h"
#include "protocol/openai_texts.h"
#include "protocol/token_estimate.h"
#include "runtime/admission.h"
#include "stages/access.h"
#include "stages/exchange_event.h"
#include "stages/route_stage.h"

namespace pillar::stages {

using runtime::InferResult;

// The response header that names the model version that answered in the primary's place.
constexpr char kFallbackHeader[] = "X-Pillar-Fallback";

namespace {

// The caller as queues tell callers apart (never 0, which means unknown): the principal on one
// client connection, so that several clients sharing a key are told apart, and a client that
// comes back on its connection after a Retry-After finds the place kept for it.
uint64_t CallerOf(const pipeline::Exchange& ex) {
  const uint64_t hash = std::hash<std::string_view>{}(ex.principal->id) * 31 +
                        std::hash<std::string_view>{}(ex.remote);
  return hash == 0 ? 1 : hash;
}

// The estimated tokens of a stream event's choice texts ("data: {...}" and its blank line, or
// several such events the guard wrote together).
int64_t ChunkTokens(std::string_view event) {
  int64_t tokens = 0;
  while (!event.empty()) {
    const size_t end = event.find("\n\n");
    std::string_view one = event.substr(0, end);
    event = end == std::string_view::npos ? std::string_view() : event.substr(end + 2);
    if (!one.starts_with("data: ")) continue;
    one.remove_prefix(6);
    tokens += protocol::EstimateChunkTokens(one);
  }
  return tokens;
}

// A streamed answer's events on their way to the client: on the exchange's thread, the head
// with the first event (the status is 200 from then on), each event written before the
// producer may send the next. The usage chunk, which pillar always asks upstreams for, reaches
// only a client that asked for it.
class ExchangeEvents final : public runtime::EventSink {
 public:
  ExchangeEvents(pipeline::Exchange& ex, bool include_usage)
      : ex_(ex), include_usage_(include_usage), waits_(ex.StreamWaits()) {}

  int64_t ClientWaitNanos(int64_t now_ns) const override {
    return waits_ != nullptr ? waits_->nanos(now_ns) : -1;
  }

  void Event(runtime::EventKind kind, std::string event,
             absl::AnyInvocable<void(bool) &&> next) override {
    if (kind == runtime::EventKind::kUsage && !include_usage_) return std::move(next)(true);
    // Counted here, on the producer's side: a client that leaves before the usage chunk is
    // charged the texts the model sent, however many tokens it put in a chunk.
    const int64_t tokens = kind == runtime::EventKind::kChunk ? ChunkTokens(event) : 0;
    ex_.post([&ex = ex_, kind, tokens, event = std::move(event), next = std::move(next)]() mutable {
      // The runner's answer came first: the stream's end is decided, and nothing may follow it
      // (review helper-98: the guard's [DONE], handed on once the chunk it held back was
      // written, went out after the error event of a deadline that ended the call meanwhile).
      if (ex.stream_ended) return std::move(next)(false);
      if (kind == runtime::EventKind::kChunk) {
        ++ex.streamed_chunks;
        ex.streamed_tokens += tokens;
      }
      if (!ex.streaming) {
        ex.first_event_ns = SystemClock().MonotonicNanos();
        pipeline::Response head;
        head.status = 200;
        head.content_type = "text/event-stream";
        head.headers.emplace_back("X-Request-Id", ex.request_id);
        if (ex.streaming_from != nullptr && ex.streaming_from != ex.model) {
          head.headers.emplace_back(kFallbackHeader, StrCat(ex.streaming_from->name, "/",
                                                            ex.streaming_from->version_text));
          // The fallback answers from here, however the stream ends: its tokens are its own
          // (found by review helper-68: a stream cut by its deadline counted them for the
          // model asked for).
          ex.answered_by = ex.streaming_from;
        }
        ex.StartStream(std::move(head));
      }
      if (kind == runtime::EventKind::kDone) {
        ex.done_sent = true;
        // The write's completion runs on this thread, before the runner can hear of its failure.
        return ex.WriteChunk(std::move(event), [&ex, next = std::move(next)](bool taken) mutable {
          ex.done_taken = taken;
          std::move(next)(taken);
        });
      }
      ex.WriteChunk(std::move(event), std::move(next));
    });
  }

  void Usage(const protocol::TokenUsage& usage) override {
    ex_.post([&ex = ex_, usage] { ex.streamed_usage = usage; });
  }

 private:
  pipeline::Exchange& ex_;
  const bool include_usage_;
  const std::shared_ptr<const WaitMeter> waits_;  // read from the producer's thread
};

// What a stream that ended without a usage generated: a token per chunk written, or the
// estimate of the texts the model sent if that is more.
int64_t StreamedCompletion(const pipeline::Exchange& ex) {
  return std::max(ex.streamed_chunks, ex.streamed_tokens);
}

// An answer that came without a usage: what a stream generated (StreamedCompletion), or the
// estimate of the answer's texts, so that an upstream that says nothing does not make its
// answers free.
int64_t EstimatedCompletion(const pipeline::Exchange& ex) {
  if (ex.streaming) return StreamedCompletion(ex);
  int64_t tokens = 0;
  protocol::ForEachChoiceText(
      ex.response.body, [&](std::string_view text) { tokens += protocol::EstimateTokens(text); });
  return tokens;
}

// A language model's call that ran out of time was cut while its model worked, and may have done
// all of that work: it is charged what it reserved (its estimated prompt and its max_tokens), or
// what it streamed if that is more. Refunding it would let a caller have the work done for free
// by asking for less time than it takes.
void KeepReservationIfOutOfTime(pipeline::Exchange& ex, const absl::Status& status) {
  if (!pipeline::GeneratesText(ex.operation) ||
      status.code() != absl::StatusCode::kDeadlineExceeded) {
    return;
  }
  protocol::TokenUsage& usage = ex.infer_result.usage;
  const int64_t charged = usage.prompt_tokens + usage.completion_tokens;
  if (ex.reserved_tokens <= charged) return;
  usage.prompt_tokens = ex.estimated_prompt_tokens;
  usage.completion_tokens = std::max<int64_t>(0, ex.reserved_tokens - ex.estimated_prompt_tokens);
}

}  // namespace

pipeline::StageResult ExecuteStage::OnRequest(pipeline::Exchange& ex) {
  const bool generates = pipeline::GeneratesText(ex.operation);
  if (ex.operation != pipeline::Operation::kInfer && !generates) {
    auto it = handlers_.find(ex.operation);
    if (it == handlers_.end()) {
      ex.Fail(absl::UnimplementedError("no handler for this operation"));
      return pipeline::StageResult::kStop;
    }
    it->second(ex);
    return ex.failed() ? pipeline::StageResult::kStop : pipeline::StageResult::kContinue;
  }
  absl::StatusOr<runtime::Priority> priority = PriorityOf(ex);
  if (!priority.ok()) {
    ex.Fail(priority.status());
    return pipeline::StageResult::kStop;
  }
  const int64_t deadline_ns = ex.timeout_ms > 0 ? ex.start_ns + ex.timeout_ms * 1'000'000 : 0;
  const uint64_t caller = CallerOf(ex);
  const uint64_t principal = std::hash<std::string_view>{}(ex.principal->id) | 1;
  if (generates) {
    runtime::GenerateRequest request = std::move(*ex.generate);
    ex.generate.reset();
    if (request.stream) {
      if (ex.sink == nullptr) {
        ex.Fail(absl::InvalidArgumentError("this call cannot be streamed"));
        return pipeline::StageResult::kStop;
      }
      request.events = std::make_shared<ExchangeEvents>(ex, request.include_usage);
      if (ex.wrap_events) request.events = ex.wrap_events(std::move(request.events));
    }
    request.deadline_ns = deadline_ns;
    request.priority = *priority;
    request.caller = caller;
    request.principal = principal;
    Run(ex, *ex.model, std::move(request), 0, absl::OkStatus());
    return pipeline::StageResult::kSuspend;
  }
  protocol::InferenceRequest request = std::move(*ex.infer_request);
  ex.infer_request.reset();
  request.deadline_ns = deadline_ns;
  request.priority = *priority;
  request.caller = caller;
  request.principal = principal;
  Run(ex, *ex.model, std::move(request), 0, absl::OkStatus());
  return pipeline::StageResult::kSuspend;
}

void ExecuteStage::Run(pipeline::Exchange& ex, const runtime::ModelVersion& version, Work work,
                       size_t next, absl::Status primary_error) {
  WatchForTheClient(ex, version, work);
  // A copy for the fallbacks, only for a model that has some.
  std::optional<Work> spare;
  if (fallback_.audit != nullptr && ex.model->config && next < ex.model->config->fallback.size()) {
    spare = work;
  }
  std::string id;
  if (const auto* infer = std::get_if<protocol::InferenceRequest>(&work)) id = infer->id;
  // Nothing below may touch `ex` after Infer(): the callback may already have resumed it.
  runtime::InferCallback done = [this, &ex, &version, id = std::move(id), spare = std::move(spare),
                                 next, primary_error = std::move(primary_error)](
                                    absl::StatusOr<InferResult> result) mutable {
    ex.post([this, &ex, &version, id = std::move(id), spare = std::move(spare), next,
             primary_error = std::move(primary_error), result = std::move(result)]() mutable {
      ex.stream_ended = ex.streaming;
      // [DONE] went out before the runner's failure came (review helper-101: a deadline
      // that ran out while its write was on its way back to the runner): the client's
      // stream is whole, and no error event may follow it. Its usage is counted here.
      // A client that went away before [DONE] was written has a cut stream (review
      // helper-117: its usage was dropped and it was logged whole).
      if (!result.ok() && ex.done_sent && !(absl::IsCancelled(result.status()) && !ex.done_taken)) {
        InferResult whole;
        whole.usage_reported = ex.streamed_usage.has_value();
        if (ex.streamed_usage) whole.usage = *ex.streamed_usage;
        result = std::move(whole);
      }
      if (result.ok()) return Answer(ex, version, std::move(id), std::move(*result));
      // The guard stopped the answer: that, not the stop it caused, is what the client hears.
      if (!ex.answer_blocked.ok()) result = ex.answer_blocked;
      if (ex.streaming) return EndStreamWithError(ex, result.status());
      // The client went away (its call was cancelled for it): that is what the log says,
      // not a primary's error before it, and no fallback runs (review helper-94).
      if (absl::IsCancelled(result.status()) && ex.answer_blocked.ok()) {
        ex.Fail(result.status());
        return ex.chain().Resume(ex, pipeline::StageResult::kStop);
      }
      if (!ex.answer_blocked.ok()) {
        ex.Fail(ex.answer_blocked);
        return ex.chain().Resume(ex, pipeline::StageResult::kStop);
      }
      absl::Status error = primary_error.ok() ? result.status() : primary_error;
      if (spare && (!primary_error.ok() || FallsBack(ex, result.status()))) {
        if (const runtime::ModelVersion* other = NextFallback(ex, next)) {
          return Run(ex, *other, std::move(*spare), next, std::move(error));
        }
      }
      if (!primary_error.ok()) {  // a fallback failed too: the primary's error, noted
        error = absl::Status(primary_error.code(),
                             StrCat(primary_error.message(), " (fallback ", version.name,
                                    " failed too: ", result.status().message(), ")"));
        primary_error.ForEachPayload(
            [&](absl::string_view key, const absl::Cord& value) { error.SetPayload(key, value); });
      }
      ex.shed = runtime::IsShed(error);
      KeepReservationIfOutOfTime(ex, error);
      // It may quote the request (a tensor's name) or an upstream's reply.
      ex.Fail(guard::RedactAll(error));
      ex.chain().Resume(ex, pipeline::StageResult::kStop);
    });
  };
  if (auto* generate = std::get_if<runtime::GenerateRequest>(&work)) {
    ex.streaming_from = &version;
    version.runner->Generate(std::move(*generate), std::move(done));
  } else {
    version.runner->Infer(std::get<protocol::InferenceRequest>(std::move(work)), std::move(done));
  }
}

// A call to a runner that can stop (one in front of other servers) is stopped when its client
// goes away before the answer (review helper-93: a client that hung up after 0.3 s kept its
// upstream call, and its key's place among the requests in flight, for the whole timeout). Once
// per exchange: a fallback's call gets the primary's cancellation with the copy of the request.
void ExecuteStage::WatchForTheClient(pipeline::Exchange& ex, const runtime::ModelVersion& version,
                                     Work& work) {
  std::shared_ptr<Cancellation>& cancellation = std::visit(
      [](auto& request) -> std::shared_ptr<Cancellation>& { return request.cancellation; }, work);
  if (cancellation != nullptr || ex.sink == nullptr || !version.runner->Cancellable()) return;
  cancellation = std::make_shared<Cancellation>();
  ex.OnClientGone([cancellation] { cancellation->Cancel(); });
}

absl::StatusOr<runtime::Priority> ExecuteStage::PriorityOf(const pipeline::Exchange& ex) {
  runtime::Priority ceiling = runtime::Priority::kNormal;
  if (ex.principal != nullptr) {
    if (auto it = ex.principal->attributes.find("priority");
        it != ex.principal->attributes.end() && !it->second.empty()) {
      // An attribute that names no class leaves the default: credentials are not requests.
      ceiling = runtime::ParsePriority(it->second.front()).value_or(ceiling);
    }
  }
  if (ex.priority.empty()) return ceiling;
  std::optional<runtime::Priority> asked = runtime::ParsePriority(ex.priority);
  if (!asked) {
    return absl::InvalidArgumentError("X-Pillar-Priority must be high, normal or low");
  }
  return std::max(*asked, ceiling);  // a caller may lower its class, never raise it
}

bool ExecuteStage::FallsBack(const pipeline::Exchange& ex, const absl::Status& status) const {
  if (runtime::IsBadGateway(status)) return !runtime::IsRefusedUpstream(status);
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted:
      return true;
    case absl::StatusCode::kDeadlineExceeded:
      // The model's own timeout, with time left before the caller's.
      return ex.timeout_ms <= 0 ||
             fallback_.clock->MonotonicNanos() < ex.start_ns + ex.timeout_ms * 1'000'000;
    default:
      return false;  // the request's own fault (400), or the server's (500): no other model helps
  }
}

const runtime::ModelVersion* ExecuteStage::NextFallback(pipeline::Exchange& ex,
                                                        size_t& next) const {
  const std::vector<std::string>& chain = ex.model->config->fallback;
  while (next < chain.size()) {
    const std::string& name = chain[next++];
    if (name == ex.model->name) continue;
    const policy::Rule* granted_by = nullptr;
    const runtime::ModelVersion* version =
        ResolveVersion(ex, name, "", fallback_.default_alias, &granted_by);
    if (version == nullptr || !version->ready()) continue;  // unseen or down: no decision to make
    // A language model falls back to another language model, a model of tensors to another
    // model of tensors: the other kind cannot read the request.
    const bool language_model = version->config && version->config->speaks_openai();
    if (language_model != pipeline::GeneratesText(ex.operation)) continue;
    if (ex.fallback_screened_alike && !ex.fallback_screened_alike(*version)) continue;
    const bool allowed = granted_by != nullptr;
    auto explain = [&] {
      return StrCat(allowed ? "fallback for " : "fallback refused for ", ex.model->resource,
                    ": rule '", allowed ? granted_by->name : std::string("none"), "'");
    };
    audit::Event event =
        ExchangeEvent(ex, audit::EventKind::kAuthorization, allowed, explain, *fallback_.clock);
    event.resource = version->resource;
    const bool recorded = fallback_.audit->Record(event);
    if (allowed && recorded) return version;
  }
  return nullptr;
}

// A stream that failed after its head went out: no other model may take over (the client has
// part of this one's answer), and the status cannot say so; the error is the stream's last event.
void ExecuteStage::EndStreamWithError(pipeline::Exchange& ex, const absl::Status& raw) {
  // It may quote the upstream's stream (a usage that does not add up), as a whole answer's
  // error may (Run).
  const absl::Status status = guard::RedactAll(raw);
  ex.error = std::string(status.message());
  // What the model generated is charged: the prompt as pillar counted it, and the texts it sent
  // (a client that leaves once it has what it wanted does not get it free), or the usage the
  // model reported before the cut where it says more (review helper-117: a client that left
  // after the usage chunk, before [DONE], was charged pillar's estimate, not the usage).
  ex.infer_result.usage = {.prompt_tokens = ex.estimated_prompt_tokens,
                           .completion_tokens = StreamedCompletion(ex)};
  if (ex.streamed_usage) {
    protocol::TokenUsage& usage = ex.infer_result.usage;
    usage.prompt_tokens = std::max(usage.prompt_tokens, ex.streamed_usage->prompt_tokens);
    usage.completion_tokens =
        std::max(usage.completion_tokens, ex.streamed_usage->completion_tokens);
  }
  KeepReservationIfOutOfTime(ex, status);
  ex.WriteChunk(pipeline::StreamErrorEvent(status),
                [&ex](bool) { ex.chain().Resume(ex, pipeline::StageResult::kContinue); });
}

void ExecuteStage::Answer(pipeline::Exchange& ex, const runtime::ModelVersion& version,
                          std::string id, InferResult result) {
  if (pipeline::GeneratesText(ex.operation)) {
    ex.response.body = std::move(result.body);
    ex.infer_result.usage = result.usage;
    if (!result.usage_reported) {  // the upstream said nothing: pillar counts it
      ex.infer_result.usage = {.prompt_tokens = ex.estimated_prompt_tokens,
                               .completion_tokens = EstimatedCompletion(ex)};
    }
  } else {
    if (ex.screen_outputs) {
      if (absl::Status screened = ex.screen_outputs(result.outputs); !screened.ok()) {
        ex.Fail(screened);
        return ex.chain().Resume(ex, pipeline::StageResult::kStop);
      }
    }
    protocol::InferenceResponse response;
    response.model_name = version.name;
    response.model_version = version.version_text;
    response.id = std::move(id);
    response.outputs = std::move(result.outputs);
    ex.response.body = protocol::EncodeInferenceResponse(response);
  }
  if (&version != ex.model) {
    ex.answered_by = &version;
    ex.response.headers.emplace_back(kFallbackHeader,
                                     StrCat(version.name, "/", version.version_text));
    if (fallback_.fallbacks != nullptr) {
      fallback_.fallbacks->Get({ex.model->name, version.name}).Increment();
    }
  }
  ex.infer_result.queue_ns = result.queue_ns;
  ex.infer_result.compute_ns = result.compute_ns;
  ex.infer_result.batch_size = result.batch_size;
  if (ex.judge_answer && !ex.streaming && pipeline::GeneratesText(ex.operation)) {
    auto judge = std::move(ex.judge_answer);
    return std::move(judge)([&ex](bool go_on) {
      ex.chain().Resume(ex,
                        go_on ? pipeline::StageResult::kContinue : pipeline::StageResult::kStop);
    });
  }
  ex.chain().Resume(ex, pipeline::StageResult::kContinue);
}

}  // namespace pillar::stages
