#include "models/simulated_config.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/toml_parse.h"

namespace pillar::models {

[[nodiscard]] absl::Status ReadSimulatedSection(const toml::table& root, std::string_view source,
                                                SimulatedConfig& out) {
  const toml::node* node = root.get("simulated");
  if (node != nullptr && !node->is_table()) {
    return absl::InvalidArgumentError(StrCat(source, ": 'simulated' must be a table"));
  }
  TomlSection section(node == nullptr ? nullptr : node->as_table(), "simulated", source);
  PILLAR_RETURN_IF_ERROR(section.ReadEnum("latency", out.latency,
                                          {{"fixed", LatencyDistribution::kFixed},
                                           {"normal", LatencyDistribution::kNormal},
                                           {"lognormal", LatencyDistribution::kLogNormal},
                                           {"empirical", LatencyDistribution::kEmpirical}}));
  // An hour bounds every latency: beyond it a simulation tests nothing but patience.
  constexpr double kMaxMs = 3'600'000;
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("latency_ms", out.latency_ms, 0, kMaxMs));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("latency_stddev_ms", out.latency_stddev_ms, 0, kMaxMs));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("latency_sigma", out.latency_sigma, 0, 10));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("error_rate", out.error_rate, 0, 1));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("throttle_rate", out.throttle_rate, 0, 1));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("hang_rate", out.hang_rate, 0, 1));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("retry_after_s", out.retry_after_s, 1, 86'400));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("hang_ms", out.hang_ms, 1, int64_t(kMaxMs)));
  int64_t seed = int64_t(out.seed);
  PILLAR_RETURN_IF_ERROR(section.ReadInt("seed", seed, 0, INT64_MAX));
  out.seed = uint64_t(seed);
  PILLAR_RETURN_IF_ERROR(section.ReadEnum(
      "api", out.api,
      {{"inference", SimulatedApi::kInference}, {"openai", SimulatedApi::kOpenAi}}));
  PILLAR_RETURN_IF_ERROR(
      section.ReadDouble("time_to_first_token_ms", out.time_to_first_token_ms, 0, kMaxMs));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("tokens_per_second", out.tokens_per_second, 0.01, 1e7));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("completion_tokens", out.completion_tokens, 1, 1 << 20));
  PILLAR_RETURN_IF_ERROR(
      section.ReadInt("embedding_dimensions", out.embedding_dimensions, 1, 1 << 14));
  PILLAR_RETURN_IF_ERROR(section.ReadInt("max_concurrency", out.max_concurrency, 1, 1 << 20));
  PILLAR_RETURN_IF_ERROR(section.ReadDouble("stream_cut_rate", out.stream_cut_rate, 0, 1));
  PILLAR_RETURN_IF_ERROR(
      section.ReadDouble("malformed_chunk_rate", out.malformed_chunk_rate, 0, 1));
  PILLAR_RETURN_IF_ERROR(section.ReadBool("echo", out.echo));
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  if (out.api == SimulatedApi::kInference) {
    for (std::string_view key : {"time_to_first_token_ms", "tokens_per_second", "completion_tokens",
                                 "embedding_dimensions", "max_concurrency", "stream_cut_rate",
                                 "malformed_chunk_rate", "echo"}) {
      if (section.Contains(key)) {
        return absl::InvalidArgumentError(
            StrCat(source, ": [simulated] ", key, " is only for api = \"openai\""));
      }
    }
  }
  if (out.error_rate + out.throttle_rate + out.hang_rate + out.stream_cut_rate +
          out.malformed_chunk_rate >
      1 + 1e-9) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [simulated] the rates of its faults add up to over 1"));
  }
  return absl::OkStatus();
}

}  // namespace pillar::models
