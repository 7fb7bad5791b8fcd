// One instance of a simulated model server (platform = "simulated"): each Execute draws an
// outcome and a latency from the version's [simulated] settings (models/simulated_config.h),
// waits that long on its instance thread, and answers with zero-filled outputs of the declared
// shapes (a BYTES output echoes the first BYTES input of its shape, as a text model's stand-in,
// or holds empty strings), or the drawn failure. Under a BatchingRunner, instance.count is how many
// requests the simulated server works on at once, and the runner's queue and its 503 with
// Retry-After behave as they do for a real model.
//
//   std::vector<std::unique_ptr<Backend>> instances;
//   for (int i = 0; i < config.instance.count; ++i)
//     instances.push_back(std::make_unique<SimulatedBackend>(config, histogram, i));
//
// Outcomes, with the probabilities of the settings (one draw per execution):
//   throttle: at once, ResourceExhausted (429) with Retry-After: retry_after_s;
//   hang:     after hang_ms, DeadlineExceeded (504), as a server that never answers would be
//             cut off by a caller's timeout;
//   error:    after the latency, Internal (500);
//   success:  after the latency, the outputs.
// The draws are a pure function of (seed, instance index, execution count), so a run replays.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "models/model_config.h"
#include "runtime/backend.h"
#include "runtime/latency_histogram.h"

namespace pillar::runtime {

class SimulatedBackend final : public Backend {
 public:
  // `histogram` is required when config.simulated.latency is kEmpirical.
  SimulatedBackend(const models::ModelConfig& config, std::optional<LatencyHistogram> histogram,
                   int instance_index);

  [[nodiscard]] absl::StatusOr<std::vector<protocol::Tensor>> Execute(
      std::vector<protocol::Tensor>& inputs) override;
  void Interrupt() override;
  // Only with no latency and no hangs: what the proxy benchmark's upstream serves.
  bool MayRunInline() const override;

  // The next latency the settings draw, in milliseconds (tests of the distributions).
  double DrawLatencyMillis();

 private:
  // Waits `millis` unless interrupted first; false when interrupted.
  bool Wait(double millis);
  std::vector<protocol::Tensor> Outputs(const std::vector<protocol::Tensor>& inputs,
                                        int64_t rows) const;
  // The first BYTES input whose shape `output` (a BYTES output, its free dimensions 1) may take.
  const protocol::Tensor* EchoedInput(const std::vector<protocol::Tensor>& inputs,
                                      const protocol::Tensor& output) const;

  const models::ModelConfig config_;
  const std::optional<LatencyHistogram> histogram_;
  std::mt19937_64 rng_;  // used by one thread at a time (runtime/backend.h)

  absl::Mutex mu_;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pillar::runtime
