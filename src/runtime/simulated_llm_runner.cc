#include "runtime/simulated_llm_runner.h"

#include <algorithm>
#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/event_loop.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "protocol/openai_request.h"

namespace pillar::runtime {

namespace asio = boost::asio;

namespace {

// Words of at most six letters: each is one token by EstimateTokens, with the space before it.
constexpr std::array<std::string_view, 32> kWords = {
    "the", "model", "answer", "is",   "a",    "short", "simple", "reply", "from",  "pillar", "with",
    "no",  "real",  "words",  "in",   "it",   "only",  "tokens", "that",  "count", "one",    "each",
    "for", "tests", "and",    "load", "runs", "of",    "your",   "own",   "data",  "here"};

// FNV-1a: a hash that is the same on every run and build, so that answers replay.
uint64_t StableHash(std::string_view bytes, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string Words(uint64_t seed, int64_t count) {
  std::mt19937_64 rng(seed);
  std::string text;
  text.reserve(size_t(count) * 6);
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) text.push_back(' ');
    text.append(kWords[rng() % kWords.size()]);
  }
  return text;
}

std::vector<float> UnitVector(uint64_t seed, int64_t dimensions) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(static_cast<size_t>(dimensions));
  double norm = 0;
  for (float& x : v) {
    x = normal(rng);
    norm += double(x) * x;
  }
  const float scale = norm > 0 ? float(1 / std::sqrt(norm)) : 0;
  for (float& x : v) x *= scale;
  return v;
}

// What an echo repeats: the last message's text for a chat, each prompt's for a text completion
// (answered with n choices a prompt, in the prompts' order, as OpenAI's API answers a list);
// none when the body has none.
std::vector<std::string> EchoedTexts(const GenerateRequest& request) {
  if (request.route == OpenAiRoute::kChatCompletions) {
    absl::StatusOr<protocol::ChatRequest> chat = protocol::ParseChatRequest(request.body, {});
    if (chat.ok() && !chat->messages.empty()) return {chat->messages.back().text};
  } else if (request.route == OpenAiRoute::kCompletions) {
    absl::StatusOr<protocol::CompletionRequest> completion =
        protocol::ParseCompletionRequest(request.body, {});
    if (completion.ok()) return std::move(completion->prompts);
  }
  return {};
}

// How many choices a chat or text completion answers: n for each of a completion's prompts.
int64_t ChoiceCount(const GenerateRequest& request) {
  const int64_t prompts = request.route == OpenAiRoute::kCompletions ? request.prompts : 1;
  return std::max<int64_t>(prompts, 1) * request.n;
}

// The words of `text` (runs of non-blanks), joined by single spaces, at most `limit` of them.
std::string FirstWords(std::string_view text, int64_t limit, int64_t* count) {
  std::string out;
  *count = 0;
  for (size_t at = 0; at < text.size() && *count < limit;) {
    at = text.find_first_not_of(" \t\r\n", at);
    if (at == std::string_view::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\r\n", at), text.size());
    if (!out.empty()) out.push_back(' ');
    out.append(text.substr(at, end - at));
    ++*count;
    at = end;
  }
  return out;
}

// What a call answers, and after how long.
struct Outcome {
  absl::StatusOr<InferResult> result;
  std::chrono::nanoseconds delay{0};
};

std::chrono::nanoseconds Millis(double ms) { return std::chrono::nanoseconds(int64_t(ms * 1e6)); }

}  // namespace

// A call waiting for its answer's time; a streamed one, for its next token's.
struct PendingCall {
  std::unique_ptr<asio::steady_timer> timer;
  InferCallback done;
  absl::StatusOr<InferResult> result;

  // A streamed answer: the completion it streams word by word, where it is, and the events made
  // but not yet taken by the client (each waits for the one before).
  std::shared_ptr<EventSink> events;
  bool chat = true;
  protocol::Completion completion;
  std::vector<std::vector<std::string_view>> words;  // of each choice, viewing completion
  int64_t tokens = 0;  // the longest choice's: the stream ends after it
  int64_t next_token = 0;
  int64_t cut_at = -1;        // the stream stops here, without [DONE]
  int64_t malformed_at = -1;  // a chunk that is not JSON goes out here
  std::chrono::nanoseconds interval{0};
  int64_t deadline_ns = 0;  // when the caller stops waiting (0: never); the stream stops then
  std::deque<std::pair<EventKind, std::string>> queue;
};

struct SimulatedLlmRunner::State : std::enable_shared_from_this<State> {
  explicit State(const models::ModelConfig& config) : sim(config.simulated), rng(sim.seed) {}

  // The answer to `request` and when it is due, drawn from the settings.
  Outcome Draw(const GenerateRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  InferResult Answer(const GenerateRequest& request) const;
  // A chat or text completion's choices, usage and finish reason.
  protocol::Completion Compose(const GenerateRequest& request) const;
  // Sets `call` up to stream `request`'s answer (the completion Answer() makes, in events).
  void PrepareStream(PendingCall& call, const GenerateRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The call's time came (or its timer was cancelled: the runner is stopping).
  void OnTimer(const std::shared_ptr<PendingCall>& call, bool cancelled);
  // A stream's next token: its events, then the wait for the one after.
  void StreamStep(const std::shared_ptr<PendingCall>& call);
  // Hands the stream's next event to the client, or waits for the next token, or ends.
  void Pump(const std::shared_ptr<PendingCall>& call);
  // Ends the call with `result` (once).
  void Finish(const std::shared_ptr<PendingCall>& call, absl::StatusOr<InferResult> result);

  const models::SimulatedConfig sim;
  asio::io_context io;  // for callers that run no event loop
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);

  absl::Mutex mu;
  std::mt19937_64 rng ABSL_GUARDED_BY(mu);
  int64_t in_flight ABSL_GUARDED_BY(mu) = 0;
  uint64_t calls ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::set<std::shared_ptr<PendingCall>> pending ABSL_GUARDED_BY(mu);
};

Outcome SimulatedLlmRunner::State::Draw(const GenerateRequest& request) {
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  double edge = sim.throttle_rate;
  if (r < edge) {
    return {WithRetryAfter(absl::ResourceExhaustedError("simulated: throttled"), sim.retry_after_s),
            {}};
  }
  if (r < (edge += sim.hang_rate)) {
    return {absl::DeadlineExceededError(StrCat("simulated: no answer in ", sim.hang_ms, " ms")),
            Millis(double(sim.hang_ms))};
  }
  if (r < (edge += sim.error_rate)) {
    return {absl::InternalError("simulated: the model failed"), Millis(sim.time_to_first_token_ms)};
  }
  InferResult answer = Answer(request);
  const int64_t per_choice = request.route == OpenAiRoute::kEmbeddings
                                 ? 1
                                 : answer.usage.completion_tokens / ChoiceCount(request);
  const double ms = sim.time_to_first_token_ms +
                    double(std::max<int64_t>(per_choice - 1, 0)) * 1e3 / sim.tokens_per_second;
  return {std::move(answer), Millis(ms)};
}

protocol::Completion SimulatedLlmRunner::State::Compose(const GenerateRequest& request) const {
  const uint64_t seed = StableHash(request.body, sim.seed);
  const int64_t tokens = std::min(request.max_tokens.value_or(INT64_MAX), sim.completion_tokens);
  const std::vector<std::string> echoed =
      sim.echo ? EchoedTexts(request) : std::vector<std::string>();
  protocol::Completion completion;
  completion.id = StrCat(request.route == OpenAiRoute::kChatCompletions ? "chatcmpl-" : "cmpl-",
                         "sim", seed % 1'000'000'007);
  completion.model = request.model;
  completion.created = SystemClock().UnixMicros() / 1'000'000;
  const int64_t choices = ChoiceCount(request);
  int64_t completion_tokens = 0;
  for (int64_t i = 0; i < choices; ++i) {
    if (sim.echo) {
      const size_t prompt = size_t(i / request.n);
      int64_t words = 0;
      completion.choices.push_back(
          FirstWords(prompt < echoed.size() ? echoed[prompt] : "", tokens, &words));
      completion_tokens += words;
    } else {
      completion.choices.push_back(Words(seed + uint64_t(i) * 7919, tokens));
      completion_tokens += tokens;
    }
  }
  completion.finish_reason = tokens < sim.completion_tokens && !sim.echo ? "length" : "stop";
  completion.usage = {.prompt_tokens = request.prompt_tokens,
                      .completion_tokens = completion_tokens};
  return completion;
}

InferResult SimulatedLlmRunner::State::Answer(const GenerateRequest& request) const {
  InferResult result;
  result.usage.prompt_tokens = request.prompt_tokens;
  if (request.route == OpenAiRoute::kEmbeddings) {
    const uint64_t seed = StableHash(request.body, sim.seed);
    std::vector<std::vector<float>> vectors;
    for (int64_t i = 0; i < request.inputs; ++i) {
      vectors.push_back(UnitVector(seed + uint64_t(i), sim.embedding_dimensions));
    }
    result.body =
        protocol::EmbeddingsBody(request.model, vectors, result.usage, request.base64_embeddings);
    return result;
  }
  const protocol::Completion completion = Compose(request);
  result.usage = completion.usage;
  result.body = request.route == OpenAiRoute::kChatCompletions
                    ? protocol::ChatCompletionBody(completion)
                    : protocol::TextCompletionBody(completion);
  return result;
}

void SimulatedLlmRunner::State::PrepareStream(PendingCall& call, const GenerateRequest& request) {
  call.events = request.events;
  call.deadline_ns = request.deadline_ns;
  call.chat = request.route == OpenAiRoute::kChatCompletions;
  call.completion = Compose(request);
  for (const std::string& text : call.completion.choices) {
    std::vector<std::string_view> words;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find(' ', at), text.size());
      words.push_back(std::string_view(text).substr(at, end - at));
      at = end + 1;
    }
    call.words.push_back(std::move(words));
  }
  for (const std::vector<std::string_view>& words : call.words) {
    call.tokens = std::max(call.tokens, int64_t(words.size()));
  }
  const int64_t tokens = call.tokens;
  call.interval = Millis(1e3 / sim.tokens_per_second);
  // The stream's own faults, drawn after the call's outcome: a cut, or a chunk that is not JSON,
  // half way through.
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < sim.stream_cut_rate) {
    call.cut_at = tokens / 2;
  } else if (r < sim.stream_cut_rate + sim.malformed_chunk_rate) {
    call.malformed_at = tokens / 2;
  }
}

void SimulatedLlmRunner::State::OnTimer(const std::shared_ptr<PendingCall>& call, bool cancelled) {
  if (cancelled) return Finish(call, absl::UnavailableError("model is unloading"));
  if (call->events == nullptr || !call->result.ok()) return Finish(call, std::move(call->result));
  StreamStep(call);
}

void SimulatedLlmRunner::State::StreamStep(const std::shared_ptr<PendingCall>& call) {
  PendingCall& c = *call;
  const protocol::Completion& done = c.completion;
  if (c.next_token == c.cut_at) {
    return Finish(call, absl::DataLossError("simulated: the stream was cut"));
  }
  // As a server that honours the caller's deadline: it stops generating once it passed.
  if (c.deadline_ns > 0 && SystemClock().MonotonicNanos() >= c.deadline_ns) {
    return Finish(call, absl::DeadlineExceededError(
                            "the caller's deadline passed while the simulated model streamed"));
  }
  const int64_t t = c.next_token++;
  for (size_t i = 0; i < c.words.size(); ++i) {
    if (t >= int64_t(c.words[i].size())) continue;
    const std::string piece = StrCat(t > 0 ? " " : "", c.words[i][size_t(t)]);
    c.queue.emplace_back(EventKind::kChunk,
                         c.chat ? protocol::ChatChunkEvent(done.id, done.model, done.created,
                                                           int64_t(i), piece, t == 0, "")
                                : protocol::TextChunkEvent(done.id, done.model, done.created,
                                                           int64_t(i), piece, ""));
  }
  if (t == c.malformed_at) c.queue.emplace_back(EventKind::kChunk, "data: {\"choices\":[\n\n");
  if (c.next_token >= c.tokens) {
    for (size_t i = 0; i < c.words.size(); ++i) {
      c.queue.emplace_back(EventKind::kChunk,
                           c.chat
                               ? protocol::ChatChunkEvent(done.id, done.model, done.created,
                                                          int64_t(i), "", false, done.finish_reason)
                               : protocol::TextChunkEvent(done.id, done.model, done.created,
                                                          int64_t(i), "", done.finish_reason));
    }
    c.queue.emplace_back(
        EventKind::kUsage,
        protocol::UsageChunkEvent(done.id, done.model, done.created, done.usage, c.chat));
    c.events->Usage(done.usage);  // known now, whether or not its event reaches the client
    c.queue.emplace_back(EventKind::kDone, std::string(protocol::kDoneEvent));
    c.next_token = INT64_MAX;  // nothing more to make
  }
  Pump(call);
}

void SimulatedLlmRunner::State::Pump(const std::shared_ptr<PendingCall>& call) {
  if (call->queue.empty() && call->next_token == INT64_MAX) {
    InferResult result;
    result.usage = call->completion.usage;
    return Finish(call, std::move(result));
  }
  if (call->queue.empty()) {  // the next token, after its interval
    {
      absl::MutexLock lock(&mu);
      if (!stopping) {
        call->timer->expires_after(call->interval);
        call->timer->async_wait([self = shared_from_this(), call](boost::system::error_code ec) {
          if (ec) return self->OnTimer(call, true);
          self->StreamStep(call);
        });
        return;
      }
    }
    return Finish(call, absl::UnavailableError("model is unloading"));
  }
  auto [kind, event] = std::move(call->queue.front());
  call->queue.pop_front();
  call->events->Event(kind, std::move(event), [self = shared_from_this(), call](bool ok) {
    if (!ok) return self->Finish(call, absl::CancelledError("the client went away"));
    // On the stream's own loop, where its timer is.
    asio::post(call->timer->get_executor(), [self, call] { self->Pump(call); });
  });
}

void SimulatedLlmRunner::State::Finish(const std::shared_ptr<PendingCall>& call,
                                       absl::StatusOr<InferResult> result) {
  {
    absl::MutexLock lock(&mu);
    if (pending.erase(call) == 0) return;  // answered already
    --in_flight;
  }
  std::move(call->done)(std::move(result));
}

SimulatedLlmRunner::SimulatedLlmRunner(const models::ModelConfig& config)
    : state_(std::make_shared<State>(config)) {
  thread_ = std::thread([state = state_] {
    NameThisThread("simulated-llm");
    state->io.run();
  });
}

SimulatedLlmRunner::~SimulatedLlmRunner() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
    // Each timer is cancelled on its own loop; its handler answers the call.
    for (const std::shared_ptr<PendingCall>& call : state_->pending) {
      asio::post(call->timer->get_executor(), [call] { call->timer->cancel(); });
    }
    state_->work.reset();
  }
  thread_.join();
  // Calls whose loop is the runner's own were answered by the handlers it ran; others answer
  // on their loops, which outlive the models.
}

void SimulatedLlmRunner::Infer(protocol::InferenceRequest, InferCallback done) {
  std::move(done)(absl::FailedPreconditionError(
      "the model is a language model: call it on the OpenAI-compatible routes "
      "(/v1/chat/completions, /v1/completions, /v1/embeddings)"));
}

void SimulatedLlmRunner::Generate(GenerateRequest request, InferCallback done) {
  State& s = *state_;
  auto call = std::make_shared<PendingCall>();
  call->done = std::move(done);
  {
    absl::MutexLock lock(&s.mu);
    if (s.stopping) {
      call->result = absl::UnavailableError("model is unloading");
    } else if (s.in_flight >= s.sim.max_concurrency) {
      call->result = UnavailableWithRetry(
          StrCat("the simulated model runs at most ", s.sim.max_concurrency, " calls at once"), 1);
    } else {
      Outcome outcome = s.Draw(request);
      std::chrono::nanoseconds delay = outcome.delay;
      call->result = std::move(outcome.result);
      if (request.events != nullptr && call->result.ok()) {
        // Streamed: the first token after the time to first token, the rest as Pump() goes.
        s.PrepareStream(*call, request);
        delay = Millis(s.sim.time_to_first_token_ms);
      }
      if (request.deadline_ns > 0 && call->events == nullptr) {
        const int64_t left = request.deadline_ns - SystemClock().MonotonicNanos();
        if (left < delay.count()) {  // the caller stops waiting first: so does the model
          delay = std::chrono::nanoseconds(std::max<int64_t>(left, 0));
          call->result = absl::DeadlineExceededError(
              "the caller's deadline passed before the simulated model answered");
        }
      }
      if (delay.count() > 0 || call->events != nullptr) {
        asio::io_context* loop = ThisThreadEventLoop();
        call->timer = std::make_unique<asio::steady_timer>(loop != nullptr ? *loop : s.io, delay);
        ++s.in_flight;
        s.pending.insert(call);
        // Armed under the lock, so that a cancel the destructor posts comes after it.
        call->timer->async_wait([state = state_, call](boost::system::error_code ec) {
          state->OnTimer(call, bool(ec));
        });
        return;
      }
    }
  }
  std::move(call->done)(std::move(call->result));  // at once: a refusal, or no delay
}

}  // namespace pillar::runtime
