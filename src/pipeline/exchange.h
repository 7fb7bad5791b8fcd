// The Exchange is one request's state as it moves through the chain of stages: what was asked,
// who asked, what it resolved to, the response, and the time each stage took.
//
//   Exchange& ex = ...;            // owned by the HTTP session for the request's lifetime
//   ex.Fail(absl::NotFoundError("unknown model 'x'"));   // a stage rejecting
// An Exchange is touched by one thread at a time: the chain hands it from stage to stage, and
// a suspended stage resumes it through `post` on the exchange's home executor.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/wait_meter.h"
#include "http/message.h"
#include "identity/principal.h"
#include "protocol/tensor.h"
#include "runtime/model_registry.h"
#include "runtime/runner.h"

namespace pillar::http {
class ResponseSink;
}  // namespace pillar::http

namespace pillar::policy {
class Policy;
struct Rule;
}  // namespace pillar::policy

namespace pillar::pipeline {

class Chain;

inline constexpr size_t kMaxStages = 16;

// What the request asks for; set by the listener from the matched route.
enum class Operation {
  kServerMetadata,
  kModelMetadata,
  kModelReady,
  kInfer,
  kMetrics,
  kAdminModels,
  kAdminBackends,
  kJob,         // an asynchronous job's state or result (GET /v2/jobs/{job})
  kListModels,  // the OpenAI-compatible model list (GET /v1/models)
  // A language model's OpenAI-compatible calls (POST /v1/chat/completions, /v1/completions,
  // /v1/embeddings): the model is named in the body.
  kChatCompletions,
  kCompletions,
  kEmbeddings,
};

// True for the calls to a language model (the three above).
bool GeneratesText(Operation op);

// True for the OpenAI-compatible routes (/v1/...): their errors take OpenAI's shape.
bool OpenAiShaped(Operation op);

// True for operations addressed to a model (the path names one).
bool TargetsModel(Operation op);

using Response = http::Response;

class Exchange {
 public:
  Exchange() = default;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Ends the request with the HTTP status and JSON error body for `status`. This is the one
  // place where absl status codes become HTTP: 400, 401, 403, 404, 413, 429, 503, 500 ...
  void Fail(const absl::Status& status);
  bool failed() const { return response.status >= 400; }
  // A failed request's message replaced by `message`, its status and headers kept.
  void ReplaceError(std::string message);

  // A streamed answer on the connection (http::ResponseSink's StartStream and WriteChunk), on
  // the exchange's thread; the listener ends the stream after the chain's response half.
  void StartStream(Response head);
  void WriteChunk(std::string bytes, absl::AnyInvocable<void(bool) &&> written);
  // How long the connection's streamed writes have waited for the client's socket
  // (http::ResponseSink::stream_waits; null without a connection), on the exchange's thread.
  std::shared_ptr<const WaitMeter> StreamWaits();
  // Runs `gone` if the client goes away before the answer starts (http::ResponseSink's
  // OnClientGone); nothing for an exchange without a connection (a job's run). On the
  // exchange's thread.
  void OnClientGone(absl::AnyInvocable<void() &&> gone);

  // --- The request, set by the listener.
  std::string request_id;
  Operation operation = Operation::kServerMetadata;
  std::string_view listener;  // "data" or "admin"
  std::string method;
  std::string target;
  std::string authorization;
  std::string body;
  std::string model_name;     // from the path, for model operations
  std::string model_version;  // from the path; empty means the policy's choice
  std::string remote;
  std::string peer_identity;     // a verified client certificate's identity, on mTLS listeners
  bool peer_unnamed = false;     // a verified certificate that names nobody (http::Request)
  std::string peer_certificate;  // its chain in DER, only on a job's submission (http::Request)
  int64_t start_ns = 0;
  int64_t timeout_ms = 0;  // what the client said it will wait (X-Pillar-Timeout-Ms); 0: unsaid
  std::string priority;    // the class the client asked for (X-Pillar-Priority); empty: unsaid
  bool shed = false;       // refused as load by its model's queue (counted by the observe stage)
  bool respond_async = false;  // Prefer: respond-async: run the infer request as a job
  std::string job_id;          // from the path, for kJob
  // Set only by the job queue, for the run of an accepted job: the principal is the job's
  // (re-checked by the authenticate stage), and its limits were charged when it was submitted.
  bool job_run = false;
  // Set by the admit stage when a job's run found its concurrency limit full: the run is tried
  // again, and does not count as one of the job's attempts.
  bool held_back = false;

  // --- Resolved by stages.
  // Set by the authenticate stage; for a request with a body, set before it runs, from the
  // credentials checked when the header arrived (app/request_handler.h), at
  // principal_checked_ns (monotonic), or, when they did not authenticate, caller_refusal says
  // why.
  std::shared_ptr<const identity::Principal> principal;
  int64_t principal_checked_ns = 0;
  std::string caller_refusal;
  // What that check took, before the chain: counted in the server-side overhead (not in the
  // authenticate stage's time, which is then only taking its answer).
  int64_t caller_check_ns = 0;
  // The policy snapshot this request is decided by, taken once by the route stage so that
  // authorize and admit (and admit's release) agree even while a reload lands.
  std::shared_ptr<const policy::Policy> policy;
  // For a model request: the rule that grants the action on the version the route stage chose
  // (it decides visibility with the same evaluation); null when none does.
  const policy::Rule* granted_by = nullptr;
  // The policy resource the request addresses ("model:digits/1", "server", "metrics"), set by
  // the route stage, and the action it asks for on it ("infer", "read_metadata" ...).
  std::string resource;
  std::string_view action;
  // Filled by the admit stage for requests holding a concurrency slot or a reservation of
  // tokens; run once when the response is complete (the admit stage's response half): gives the
  // slot back and settles the tokens the call used.
  absl::AnyInvocable<void(Exchange&) &&> release;
  // The model registry this request was routed in (kept to its end, so `model` stays valid
  // while a newer registry takes over) and the version it addresses.
  std::shared_ptr<const runtime::ModelRegistry> models;
  const runtime::ModelVersion* model = nullptr;
  std::optional<protocol::InferenceRequest> infer_request;
  // A language model's call, read from the body by the route stage (which needs its model).
  std::optional<runtime::GenerateRequest> generate;
  // A streamed answer ("stream": true): the connection it is written to (null where nothing can
  // stream: a job's run), whether its head went out (the status cannot change any more, and the
  // chain's response half runs once the stream ends), the version whose events it carries, and
  // the bytes of events written.
  std::shared_ptr<http::ResponseSink> sink;
  // Set by a stage that screens a streamed answer (the guard): wraps the sink the execute stage
  // hands the runner, so that every event passes through it first.
  absl::AnyInvocable<std::shared_ptr<runtime::EventSink>(std::shared_ptr<runtime::EventSink>)>
      wrap_events;
  // Set by a stage that screens a model's answer of tensors (the guard, for BYTES outputs): sees,
  // and may rewrite, the outputs before they are encoded; an error fails the call with it.
  absl::AnyInvocable<absl::Status(std::vector<protocol::Tensor>&)> screen_outputs;
  // Set by a stage that judges a language model's whole answer (the guard's classifier): called
  // with the answer in `response`, it calls `done` on the exchange's thread with whether the
  // call goes on (having failed the exchange when not).
  absl::AnyInvocable<void(absl::AnyInvocable<void(bool) &&> done) &&> judge_answer;
  // The guard's findings in this call ("prompt EMAIL_ADDRESS redact 12-29; ..."), types and
  // offsets only, for its audit record; and why it withheld the answer, when it did.
  std::string content_findings;
  bool content_blocked = false;
  // Set by the guard: whether a fallback is screened as the model asked for is (a fallback that
  // is not is passed over, so no fallback answers under laxer screening). Null: any may answer.
  std::function<bool(const runtime::ModelVersion&)> fallback_screened_alike;
  absl::Status answer_blocked;
  bool streaming = false;
  // Set on the exchange's thread when the runner's answer to a streamed call arrives: an event
  // handed on after it (a guard's held [DONE]) is dropped. Such an event is posted to this thread
  // before the stream's last write completes, and so before the exchange can end.
  bool stream_ended = false;
  // Set when [DONE] goes to the connection: nothing may follow it, and the client's stream is
  // whole whatever the runner answers after it, unless the client went away before [DONE] was
  // written (done_taken stays false: review helper-117, a stream cut there was logged whole
  // and charged without the usage that had come).
  bool done_sent = false;
  bool done_taken = false;  // [DONE]'s write completed
  // The usage of a streamed answer, once its runner read it (EventSink::Usage, whether or not
  // its event reaches the client): what a stream cut after it is charged, at least.
  std::optional<protocol::TokenUsage> streamed_usage;
  int64_t first_event_ns = 0;   // monotonic, when the first event went to the client
  int64_t streamed_chunks = 0;  // chunks of the answer written (about a token each)
  // The estimated tokens of the texts of the chunks the model sent (written or not): what a
  // stream cut before its usage came is charged, when more than a token a chunk.
  int64_t streamed_tokens = 0;
  int64_t estimated_prompt_tokens = 0;  // pillar's estimate, for answers without a usage
  int64_t choices_asked = 1;            // the request's n: an answer may hold no more choices
  // What the call reserves of token limits (its estimated prompt and the most it may generate),
  // set by the route stage; the admit stage settles it against the usage once answered.
  int64_t reserved_tokens = 0;
  const runtime::ModelVersion* streaming_from = nullptr;
  int64_t streamed_bytes = 0;
  // The version of another model that answered for `model` (its fallback chain), if one did.
  const runtime::ModelVersion* answered_by = nullptr;
  runtime::InferResult infer_result;  // outputs moved out once encoded
  std::string error;                  // the message of a failure, for logs

  Response response;

  // Nanoseconds spent in each stage, request and response halves together.
  std::array<int64_t, kMaxStages> stage_ns{};

  // --- Plumbing.
  // Runs a closure on the thread that owns this exchange (the connection's executor).
  absl::AnyInvocable<void(absl::AnyInvocable<void() &&>)> post;
  // Called once, after the last stage's response half. The chain moves it out before calling
  // it, so it may destroy the exchange.
  absl::AnyInvocable<void(Exchange&) &&> on_complete;

 private:
  friend class Chain;
  Chain* chain_ = nullptr;
  size_t next_stage_ = 0;
  int64_t suspended_at_ns_ = 0;

 public:
  Chain& chain() const { return *chain_; }
};

// The HTTP status for an absl status code.
int HttpStatusFor(absl::StatusCode code);

// The event that ends a stream which failed after its head went out (its status cannot say so
// any more): data: {"error":{...}} in OpenAI's shape, as its clients read an error mid-stream.
std::string StreamErrorEvent(const absl::Status& status);

}  // namespace pillar::pipeline
