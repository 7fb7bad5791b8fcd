// A simulated language model behind an OpenAI-compatible API (platform = "simulated" with
// [simulated] api = "openai"): what the gateway's tests and benchmarks run against, and what a
// user load-tests with instead of paying for real completions.
//
//   SimulatedLlmRunner runner(config);
//   runner.Generate(std::move(request), [](absl::StatusOr<InferResult> r) { ... r->body ... });
//
// Each call draws an outcome from the [simulated] rates with the version's seed: a throttle (429
// with Retry-After at once), a hang (504 after hang_ms), an error (500 after the time to first
// token), or an answer. An answer is deterministic for its body and seed: each choice is
// min(max_tokens, completion_tokens) words of a small vocabulary, each word one token by
// protocol/token_estimate.h's count, so that a client's estimate and the answer's usage agree;
// it arrives after time_to_first_token_ms plus a token interval per further token. Usage adds
// up: prompt_tokens is the request's estimate, completion_tokens the words of all choices.
// Embeddings are unit vectors of embedding_dimensions drawn from the body and input index.
//
// Waiting is a timer, not a thread: on the event loop of the calling server thread (so 64
// concurrent streams cost 64 timers, not 64 threads), or on the runner's own thread for callers
// without one (jobs). At most max_concurrency calls run at once; beyond, 503 with Retry-After.
// A call past its caller's deadline ends then, with 504: nobody waits for it any more.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "models/model_config.h"
#include "runtime/runner.h"

namespace pillar::runtime {

class SimulatedLlmRunner final : public Runner {
 public:
  explicit SimulatedLlmRunner(const models::ModelConfig& config);
  // Calls still waiting are answered "model is unloading".
  ~SimulatedLlmRunner() override;
  SimulatedLlmRunner(const SimulatedLlmRunner&) = delete;
  SimulatedLlmRunner& operator=(const SimulatedLlmRunner&) = delete;

  void Infer(protocol::InferenceRequest request, InferCallback done) override;
  void Generate(GenerateRequest request, InferCallback done) override;
  bool Ready() const override { return true; }

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace pillar::runtime
