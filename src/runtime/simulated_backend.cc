#include "runtime/simulated_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/time/time.h"
#include "common/strings.h"
#include "runtime/runner.h"

namespace pillar::runtime {
namespace {

using models::LatencyDistribution;

// Distinct, well-mixed streams per instance from one seed (SplitMix64's finaliser).
uint64_t InstanceSeed(uint64_t seed, int instance_index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * uint64_t(instance_index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

SimulatedBackend::SimulatedBackend(const models::ModelConfig& config,
                                   std::optional<LatencyHistogram> histogram, int instance_index)
    : config_(config),
      histogram_(std::move(histogram)),
      rng_(InstanceSeed(config.simulated.seed, instance_index)) {}

double SimulatedBackend::DrawLatencyMillis() {
  const models::SimulatedConfig& s = config_.simulated;
  double ms = s.latency_ms;
  switch (s.latency) {
    case LatencyDistribution::kFixed:
      break;
    case LatencyDistribution::kNormal:
      ms = std::normal_distribution<double>(s.latency_ms, s.latency_stddev_ms)(rng_);
      break;
    case LatencyDistribution::kLogNormal:
      // The median of exp(N(mu, sigma)) is exp(mu).
      ms = s.latency_ms <= 0
               ? 0
               : std::lognormal_distribution<double>(std::log(s.latency_ms), s.latency_sigma)(rng_);
      break;
    case LatencyDistribution::kEmpirical:
      ms = histogram_ ? histogram_->SampleMillis(rng_) : s.latency_ms;
      break;
  }
  // A normal draw can be negative and a log-normal one huge: a latency is in [0, an hour].
  return std::clamp(ms, 0.0, LatencyHistogram::kMaxMillis);
}

absl::StatusOr<std::vector<protocol::Tensor>> SimulatedBackend::Execute(
    std::vector<protocol::Tensor>& inputs) {
  const models::SimulatedConfig& s = config_.simulated;
  const double outcome = std::uniform_real_distribution<double>(0, 1)(rng_);
  const double latency = DrawLatencyMillis();
  if (outcome < s.throttle_rate) {
    return WithRetryAfter(absl::ResourceExhaustedError("simulated: throttled"), s.retry_after_s);
  }
  if (outcome < s.throttle_rate + s.hang_rate) {
    if (!Wait(double(s.hang_ms))) return absl::UnavailableError("model is unloading");
    return absl::DeadlineExceededError(StrCat("simulated: no answer in ", s.hang_ms, " ms"));
  }
  if (!Wait(latency)) return absl::UnavailableError("model is unloading");
  if (outcome < s.throttle_rate + s.hang_rate + s.error_rate) {
    return absl::InternalError("simulated: the model failed");
  }
  const int64_t rows = config_.max_batch_size > 0 && !inputs.empty() && !inputs[0].shape.empty()
                           ? inputs[0].shape[0]
                           : 0;
  return Outputs(inputs, rows);
}

bool SimulatedBackend::MayRunInline() const {
  const models::SimulatedConfig& s = config_.simulated;
  return s.hang_rate == 0 && s.latency == models::LatencyDistribution::kFixed && s.latency_ms == 0;
}

void SimulatedBackend::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
}

bool SimulatedBackend::Wait(double millis) {
  // absl's timed wait may end a fraction of a millisecond early on the steady clock (CI saw a
  // 50 ms wait end at 49.6 ms): what is left is waited again, so a simulated latency is never
  // shorter than the one drawn.
  using Steady = std::chrono::steady_clock;
  const Steady::time_point until =
      Steady::now() + std::chrono::duration_cast<Steady::duration>(
                          std::chrono::duration<double, std::milli>(millis));
  absl::MutexLock lock(&mu_);
  const absl::Condition interrupted(&interrupted_);
  for (Steady::duration left = until - Steady::now(); left > Steady::duration::zero();
       left = until - Steady::now()) {
    if (mu_.AwaitWithTimeout(interrupted, absl::FromChrono(left))) return false;
  }
  return !interrupted_;
}

std::vector<protocol::Tensor> SimulatedBackend::Outputs(const std::vector<protocol::Tensor>& inputs,
                                                        int64_t rows) const {
  std::vector<protocol::Tensor> outputs;
  outputs.reserve(config_.outputs.size());
  for (const models::TensorSpec& spec : config_.outputs) {
    protocol::Tensor t;
    t.name = spec.name;
    t.datatype = spec.datatype;
    if (config_.max_batch_size > 0) t.shape.push_back(rows);
    for (int64_t d : spec.shape) t.shape.push_back(d < 0 ? 1 : d);  // a free dimension: 1
    if (const protocol::Tensor* echoed = EchoedInput(inputs, t)) {
      t.shape = echoed->shape;
      t.data = echoed->data;
    } else if (t.datatype == protocol::DataType::kBytes) {
      t.data.assign(size_t(t.ElementCount()) * 4, '\0');  // empty strings: each a zero length
    } else {
      t.data.assign(size_t(t.ElementCount()) * protocol::ElementSize(t.datatype), '\0');
    }
    outputs.push_back(std::move(t));
  }
  return outputs;
}

const protocol::Tensor* SimulatedBackend::EchoedInput(const std::vector<protocol::Tensor>& inputs,
                                                      const protocol::Tensor& output) const {
  if (output.datatype != protocol::DataType::kBytes) return nullptr;
  const size_t batched = config_.max_batch_size > 0 ? 1 : 0;
  const models::TensorSpec& spec =
      *std::find_if(config_.outputs.begin(), config_.outputs.end(),
                    [&](const models::TensorSpec& s) { return s.name == output.name; });
  for (const protocol::Tensor& in : inputs) {
    if (in.datatype != output.datatype || in.shape.size() != output.shape.size()) continue;
    bool fits = batched == 0 || in.shape[0] == output.shape[0];
    for (size_t d = 0; fits && d < spec.shape.size(); ++d) {
      fits = spec.shape[d] < 0 || spec.shape[d] == in.shape[d + batched];
    }
    if (fits) return &in;
  }
  return nullptr;
}

}  // namespace pillar::runtime
