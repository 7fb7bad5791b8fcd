// The [simulated] table of a model.toml whose platform is "simulated": a stand-in for a model
// server, with outputs of the declared shapes, a latency distribution, and rates of errors,
// throttling (429) and hangs, all seeded. What load and chaos tests run against, and what a
// user load-tests with instead of paying for a real endpoint (docs/formats/model_store.md).
//
//   [simulated]
//   latency = "lognormal"   # fixed | normal | lognormal | empirical
//   latency_ms = 20         # fixed: the latency; normal: the mean; lognormal: the median
//   latency_sigma = 0.5     # lognormal: the standard deviation of the latency's logarithm
//   error_rate = 0.01
//   seed = 7
//
// With api = "openai" the simulation is of a language model behind an OpenAI-compatible API
// (runtime/simulated_llm_runner.h): deterministic completions of completion_tokens tokens, the
// first after time_to_first_token_ms and the others at tokens_per_second, usage that adds up,
// embeddings of embedding_dimensions; the rates above draw its faults, and stream_cut_rate and
// malformed_chunk_rate those only a stream can have.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace pillar::models {

enum class LatencyDistribution { kFixed, kNormal, kLogNormal, kEmpirical };

// The API a simulated model answers: the Open Inference Protocol's tensors, or OpenAI's.
enum class SimulatedApi { kInference, kOpenAi };

struct SimulatedConfig {
  // The version's file that holds the histogram of an empirical distribution
  // (runtime/latency_histogram.h); a fixed name, so that it is signed with the version.
  static constexpr std::string_view kHistogramFile = "latency_histogram.txt";

  LatencyDistribution latency = LatencyDistribution::kFixed;
  double latency_ms = 1;         // fixed: the value; normal: the mean; lognormal: the median
  double latency_stddev_ms = 0;  // normal
  double latency_sigma = 0.5;    // lognormal
  // Each execution (one request, or one batch when the model batches) draws one outcome:
  // a hang, a throttle, an error, or success, with these probabilities.
  double error_rate = 0;     // answered with an internal error after the latency
  double throttle_rate = 0;  // answered at once with 429 and Retry-After: retry_after_s
  double hang_rate = 0;      // answered with 504 only after hang_ms
  int64_t retry_after_s = 1;
  int64_t hang_ms = 60'000;
  uint64_t seed = 1;

  // api = "openai" only.
  SimulatedApi api = SimulatedApi::kInference;
  double time_to_first_token_ms = 20;
  double tokens_per_second = 100;
  int64_t completion_tokens = 16;  // per choice, unless the request's max_tokens is lower
  int64_t embedding_dimensions = 8;
  int64_t max_concurrency = 1024;  // generations at once; beyond: 503 with Retry-After
  // A stream that stops after half its tokens without [DONE], and one with a chunk that is not
  // JSON, drawn like the other faults.
  double stream_cut_rate = 0;
  double malformed_chunk_rate = 0;
  // The answer repeats the last message (or prompt) word by word instead of drawn words: what a
  // test of the content guard's answer screening sends its values through.
  bool echo = false;
};

// Reads the [simulated] table of `root` (absent: all defaults) into `out`, with the strict errors
// of the rest of model.toml (file, table and key). The rates must sum to at most 1.
[[nodiscard]] absl::Status ReadSimulatedSection(const toml::table& root, std::string_view source,
                                                SimulatedConfig& out);

}  // namespace pillar::models
