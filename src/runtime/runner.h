// A Runner executes inference for one model version: the in-process batching runner (TorchScript
// and simulated instances) or a remote one (upstream/), so the pipeline never knows which it
// talks to.
//
//   runner.Infer(std::move(request), [](absl::StatusOr<InferResult> r) { ... });
// Infer() calls `done` exactly once: on a runner's thread, on the caller's thread before it
// returns (an immediate refusal; a lone request a batching runner ran inline), or on an event
// loop (a remote runner's I/O). `done` may run under the runner's lock: it must hand its work
// off (the execute stage posts it to the request's loop) and never call into a runner.
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/remote_config.h"
#include "protocol/openai_response.h"
#include "protocol/tensor.h"

namespace pillar::runtime {

struct InferResult {
  std::vector<protocol::Tensor> outputs;
  // A language model's answer (Generate): the OpenAI-compatible JSON body as the client gets it,
  // and the tokens it used, from the answer's "usage".
  std::string body;
  protocol::TokenUsage usage;
  bool usage_reported = true;  // false: the upstream's answer said nothing of its usage
  int64_t queue_ns = 0;        // waiting for a batch and an instance
  int64_t compute_ns = 0;      // the batch's execution, shared by its requests
  int64_t batch_size = 0;      // rows in the batch this request ran in
};

using InferCallback = absl::AnyInvocable<void(absl::StatusOr<InferResult>) &&>;

// The OpenAI-compatible operations a language model answers.
enum class OpenAiRoute { kChatCompletions, kCompletions, kEmbeddings };
// The path of `route` on an OpenAI-compatible server: "/v1/chat/completions" ...
std::string_view OpenAiPath(OpenAiRoute route);

// The events of a streamed answer (server-sent events), as a runner hands them on.
enum class EventKind {
  kChunk,  // a chunk of the answer ("data: {chat.completion.chunk}")
  kUsage,  // the chunk with the usage (choices empty), which pillar always asks for
  kDone,   // "data: [DONE]", the last
};

// Where a streamed answer goes, event by event, in order (GenerateRequest::events).
class EventSink {
 public:
  virtual ~EventSink() = default;
  // One whole event ("data: ...\n\n"). `next` runs (on any thread) once the client has taken
  // it, with false when the client is gone: a producer sends the next event only after
  // next(true), so a stream holds at most one event however slowly its client reads, and stops
  // (its call ends Cancelled) on next(false).
  virtual void Event(EventKind kind, std::string event, absl::AnyInvocable<void(bool) &&> next) = 0;
  // How long the stream's writes have waited for the client's socket, to `now_ns`
  // (MonotonicNanos): the time the client held the stream back by not reading. -1 when the sink
  // cannot tell (no connection: a job's run). Callable from any thread.
  virtual int64_t ClientWaitNanos(int64_t now_ns) const {
    (void)now_ns;
    return -1;
  }
  // The usage of the answer, as soon as the producer has read it, whether or not its event
  // reaches the client (which may have gone by then): what a stream cut after it is charged at
  // least (review helper-117). Callable from any thread.
  virtual void Usage(const protocol::TokenUsage& usage) { (void)usage; }
};

// One call to a language model: the client's body, already checked by the protocol's parser
// (protocol/openai_request.h), with what a runner needs of it read out.
struct GenerateRequest {
  OpenAiRoute route = OpenAiRoute::kChatCompletions;
  std::string body;
  std::string model;  // as the client named it, which answers carry
  bool stream = false;
  bool include_usage = false;  // the client asked for the usage chunk (stream_options)
  std::optional<int64_t> max_tokens;
  bool set_max_tokens = false;  // the model's default_max_tokens: the upstream is sent it
  int64_t n = 1;
  int64_t prompts = 1;             // a completion's prompts: it is answered with n choices for each
  int64_t inputs = 1;              // embeddings: how many texts
  bool base64_embeddings = false;  // embeddings: encoding_format "base64"
  int64_t prompt_tokens = 0;       // estimated on arrival (protocol/token_estimate.h)
  // stream: where the events go. The call's `done` then comes after the last event (its body
  // empty, its usage from the usage chunk), or with the failure; a failure after an event was
  // taken cannot be answered as a status any more (the response began).
  std::shared_ptr<EventSink> events;
  // As InferenceRequest carries them (protocol/tensor.h): when the caller stops waiting, its
  // class, and who it is, for the queues.
  int64_t deadline_ns = 0;
  protocol::Priority priority = protocol::Priority::kNormal;
  uint64_t caller = 0;
  uint64_t principal = 0;
  std::shared_ptr<Cancellation> cancellation;  // as InferenceRequest's
};

// What a runner in front of other model servers knows of them, for `pillar backends` and the
// admin API (GET /admin/v1/backends).
struct UpstreamStatus {
  struct Endpoint {
    std::string url;  // never with credentials
    std::string zone;
    int priority = 1;
    int weight = 1;
    std::string health;   // healthy, ejected, half_open, unhealthy (failing active checks)
    std::string breaker;  // closed, open, half_open
    int64_t outstanding = 0;
    double latency_ms = 0;  // recent average; 0 before the first reply
    int64_t ejections = 0;
    int64_t trips = 0;
    int64_t breaker_open_ms = 0;  // how much longer the breaker stays open
  };
  std::string breaker;  // the backend's own breaker
  int64_t trips = 0;
  int64_t breaker_open_ms = 0;
  int64_t in_flight = 0;
  int64_t queued = 0;
  std::vector<Endpoint> endpoints;
};

class Runner {
 public:
  virtual ~Runner() = default;

  // InvalidArgument when the request does not match the model's signature; Unavailable with a
  // retry-after payload (see RetryAfterSeconds) when the queue is full.
  virtual void Infer(protocol::InferenceRequest request, InferCallback done) = 0;
  // Runs a language model's call (models that speak OpenAI's API); `done` as for Infer(), with
  // the answer's body and usage. FailedPrecondition for a model of tensors.
  virtual void Generate(GenerateRequest request, InferCallback done);
  virtual bool Ready() const = 0;
  // Whether it stops a call whose request's cancellation is cancelled (the client went away).
  virtual bool Cancellable() const { return false; }
  // What it knows of the servers behind it; none for a runner that runs the model itself.
  virtual std::optional<UpstreamStatus> Upstreams() const { return std::nullopt; }
  // Takes a new [remote] configuration into service without a restart (a backends file
  // changed); FailedPrecondition for a runner that runs the model itself.
  [[nodiscard]] virtual absl::Status Reconfigure(const models::RemoteConfig& /*remote*/) {
    return absl::FailedPreconditionError("not a remote model");
  }
};

// The payload key under which a Unavailable status carries its retry hint, in seconds.
inline constexpr std::string_view kRetryAfterPayload = "pillar/retry-after-seconds";
[[nodiscard]] absl::Status UnavailableWithRetry(std::string_view message, int64_t seconds);
// `status` (not OK) carrying a retry hint: a 429 or 503 then answers with Retry-After.
[[nodiscard]] absl::Status WithRetryAfter(absl::Status status, int64_t seconds);

// An upstream model server failed or answered what cannot be used: Unavailable, answered to the
// client as 502 Bad Gateway (absl has no code of its own for it).
inline constexpr std::string_view kBadGatewayPayload = "pillar/bad-gateway";
[[nodiscard]] absl::Status BadGateway(std::string_view message);
bool IsBadGateway(const absl::Status& status);
// An upstream refused the request itself (a 4xx other than 429): a 502 that another model
// would not fix, so no fallback is tried.
[[nodiscard]] absl::Status RefusedUpstream(std::string_view message);
bool IsRefusedUpstream(const absl::Status& status);
// The retry hint carried by `status`, if any.
std::optional<int64_t> RetryAfterSeconds(const absl::Status& status);

}  // namespace pillar::runtime
