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
  PILLAR_RETURN_IF_ERROR(section.CheckNoUnknownKeys());
  if (out.error_rate + out.throttle_rate + out.hang_rate > 1 + 1e-9) {
    return absl::InvalidArgumentError(
        StrCat(source, ": [simulated] error_rate + throttle_rate + hang_rate is over 1"));
  }
  return absl::OkStatus();
}

}  // namespace pillar::models
