// `pillar train`: the demo digits MLP (64-128-64-10) trained with LibTorch's C++ API, with
// checkpoints through the library every `every` steps, resuming from the newest good one at
// start and writing a final one on SIGTERM or SIGUSR1. Deterministic: with the same seed, an
// interrupted-and-resumed run ends with the same weights, bit for bit, as an uninterrupted one
// (one thread, batches drawn from (seed, step), momentum kept in the checkpoint).
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/stop_signal.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "torch_module/torch_module.h"
#include "torch_module/torch_state.h"

namespace pillar::torch_module {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pillar train: %s\n", std::string(status.message()).c_str());
  return 1;
}

struct Data {
  torch::Tensor x;  // [n, 64] in [0, 1]
  torch::Tensor y;  // [n]
};

[[nodiscard]] absl::StatusOr<Data> ReadDigits(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::string line;
  std::getline(in, line);  // header
  std::vector<float> x;
  std::vector<int64_t> y;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string field;
    int column = 0;
    while (std::getline(fields, field, ',')) {
      int value;
      if (!ParseInt(field, &value) || value < 0 || value > 16) {
        return absl::InvalidArgumentError(StrCat(path, ": bad value '", field, "'"));
      }
      if (column++ == 0) {
        y.push_back(value);
      } else {
        x.push_back(float(value) / 16.0f);
      }
    }
    if (column != 65) return absl::InvalidArgumentError(StrCat(path, ": a row needs 65 columns"));
  }
  if (y.empty()) return absl::InvalidArgumentError(StrCat(path, ": no rows"));
  const int64_t n = int64_t(y.size());
  return Data{torch::from_blob(x.data(), {n, 64}, torch::kFloat).clone(),
              torch::from_blob(y.data(), {n}, torch::kLong).clone()};
}

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(64, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 64))),
        fc3(register_module("fc3", torch::nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// The SHA-256 of every parameter's bytes, in order: what "bitwise identical" is checked on.
std::string WeightsDigest(Mlp& model) {
  std::string bytes;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor t = p.value().contiguous();
    bytes.append(static_cast<const char*>(t.data_ptr()), size_t(t.numel() * t.element_size()));
  }
  return HexEncode(Sha256(bytes));
}

// What a checkpoint holds: the model's parameters by name, and each one's momentum.
struct TrainState {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<torch::Tensor> velocity;
};

// The model's parameters, and no momentum yet.
TrainState InitialState(Mlp& model) {
  TrainState state;
  for (const auto& p : model->named_parameters()) state.params.emplace_back(p.key(), p.value());
  for (const auto& [name, p] : state.params) state.velocity.push_back(torch::zeros_like(p));
  return state;
}

[[nodiscard]] absl::StatusOr<std::unique_ptr<ckpt::CheckpointManager>> OpenManager(
    const TrainOptions& options) {
  ckpt::CheckpointManager::Options manager_options;
  manager_options.fast_dir = options.run;
  manager_options.durable_dir = options.durable;
  manager_options.retention.keep_last = options.keep_last;
  // Asynchronous saves are pipelined: the copy overlaps the next forward and backward passes.
  manager_options.pipelined_snapshot = !options.sync;
  return ckpt::CheckpointManager::Open(manager_options);
}

// "128x64".
std::string ShapeText(c10::IntArrayRef sizes) {
  std::string text;
  for (int64_t d : sizes) StrAppend(&text, text.empty() ? "" : "x", d);
  return text.empty() ? "scalar" : text;
}

// Loads the newest good checkpoint into `state`; answers its step, or 0 when there is none.
[[nodiscard]] absl::StatusOr<int64_t> Resume(ckpt::CheckpointManager& manager, TrainState& state) {
  std::vector<std::string> notes;
  absl::StatusOr<ckpt::LoadedCheckpoint> latest = manager.LoadLatest(&notes);
  for (const std::string& note : notes)
    std::fprintf(stderr, "pillar train: skipped %s\n", note.c_str());
  if (!latest.ok() && !absl::IsNotFound(latest.status())) return latest.status();
  // Checkpoints there, none of them loading: starting over would throw the run's progress away
  // without a word (review helper-122), so that is the operator's call.
  if (!latest.ok() && !notes.empty()) {
    return absl::FailedPreconditionError(
        "no checkpoint of the run loads (each one skipped is named above); move them away to "
        "start the run over from step 0");
  }
  const int64_t start = latest.ok() ? latest->manifest().step : 0;
  // What LoadLatest skipped would block the saves of those steps again: set aside.
  absl::StatusOr<std::vector<std::string>> aside = manager.SetAsideNewerThan(start);
  if (!aside.ok()) return aside.status();
  for (const std::string& moved : *aside) {
    std::fprintf(stderr, "pillar train: set aside %s (it did not load)\n", moved.c_str());
  }
  if (!latest.ok()) return 0;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < state.params.size(); ++i) {
    auto& [name, param] = state.params[i];
    // Every tensor of the shape and type the model has, the momentum's too (review helper-121:
    // a momentum of another shape aborted the trainer in copy_, and an int32 weight was
    // converted to float without a word): a checkpoint imported from elsewhere may hold either.
    for (const std::string& entry : {"model." + name, "momentum." + name}) {
      absl::StatusOr<torch::Tensor> t = ckpt::LoadTensor(*latest, entry);
      if (!t.ok()) return t.status();
      if (!t->sizes().equals(param.sizes()) || t->scalar_type() != param.scalar_type()) {
        return absl::InvalidArgumentError(
            StrCat("checkpoint entry ", entry, " is not a ", c10::toString(param.scalar_type()),
                   " tensor of the model's shape ", ShapeText(param.sizes()),
                   " (a checkpoint of another model?)"));
      }
      (entry.starts_with("model.") ? param : state.velocity[i]).copy_(*t);
    }
  }
  std::printf("resumed from step %lld\n", static_cast<long long>(start));
  return start;
}

[[nodiscard]] absl::Status SaveState(ckpt::CheckpointManager& manager, const TrainOptions& options,
                                     const TrainState& state, int64_t step) {
  std::vector<ckpt::Source> sources;
  for (size_t i = 0; i < state.params.size(); ++i) {
    absl::StatusOr<ckpt::Source> w =
        ckpt::TensorSource("model." + state.params[i].first, state.params[i].second);
    absl::StatusOr<ckpt::Source> v =
        ckpt::TensorSource("momentum." + state.params[i].first, state.velocity[i]);
    if (!w.ok()) return w.status();
    if (!v.ok()) return v.status();
    sources.push_back(std::move(*w));
    sources.push_back(std::move(*v));
  }
  absl::StatusOr<bool> saved = manager.Save(
      step, sources, {{"seed", std::to_string(options.seed)}, {"trainer", "pillar train"}});
  if (!saved.ok()) return saved.status();
  if (options.sync) return manager.Wait();
  return absl::OkStatus();
}

// One SGD step with momentum on the batch of `step`; answers its loss.
torch::Tensor TrainStep(Mlp& model, const Data& data, const TrainOptions& options, int64_t step,
                        TrainState& state, ckpt::CheckpointManager& manager) {
  // The batch depends only on (seed, step), so a resumed run sees the same batches.
  std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ull ^ uint64_t(step));
  std::uniform_int_distribution<int64_t> pick(0, data.x.size(0) - 1);
  std::vector<int64_t> rows(static_cast<size_t>(options.batch));
  for (int64_t& r : rows) r = pick(rng);
  torch::Tensor index = torch::from_blob(rows.data(), {options.batch}, torch::kLong);
  torch::Tensor x = data.x.index_select(0, index);
  torch::Tensor y = data.y.index_select(0, index);
  model->zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
  loss.backward();
  manager.AwaitSnapshot();  // the update below changes what the last Save() copies
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < state.params.size(); ++i) {
    state.velocity[i].mul_(options.momentum).add_(state.params[i].second.grad());
    state.params[i].second.sub_(state.velocity[i] * options.lr);
  }
  return loss;
}

}  // namespace

int RunTrain(const TrainOptions& options) {
  if (options.run.empty()) return Fail(absl::InvalidArgumentError("--run is required"));
  if (options.every <= 0 || options.steps <= 0 || options.batch <= 0) {
    return Fail(absl::InvalidArgumentError("--steps, --every and --batch must be positive"));
  }
  at::set_num_threads(1);  // one thread: the same floating-point order every time
  absl::StatusOr<Data> data = ReadDigits(options.data);
  if (!data.ok()) return Fail(data.status());
  torch::manual_seed(options.seed);
  Mlp model;
  TrainState state = InitialState(model);
  absl::StatusOr<std::unique_ptr<ckpt::CheckpointManager>> opened = OpenManager(options);
  if (!opened.ok()) return Fail(opened.status());
  ckpt::CheckpointManager& manager = **opened;
  absl::StatusOr<int64_t> start = Resume(manager, state);
  if (!start.ok()) return Fail(start.status());
  std::fflush(stdout);

  ckpt::InstallStopSignals();
  int64_t saved_at = *start;
  for (int64_t step = *start; step < options.steps; ++step) {
    const torch::Tensor loss = TrainStep(model, *data, options, step, state, manager);
    const int64_t done = step + 1;
    std::printf("step %lld loss %.6f\n", static_cast<long long>(done), loss.item<float>());
    if (done % options.every == 0 || done == options.steps) {
      if (absl::Status s = SaveState(manager, options, state, done); !s.ok()) return Fail(s);
      saved_at = done;
      std::printf("checkpoint %lld\n", static_cast<long long>(done));
    }
    std::fflush(stdout);
    if (ckpt::StopRequested() && done < options.steps) {
      if (saved_at != done) {
        if (absl::Status s = SaveState(manager, options, state, done); !s.ok()) return Fail(s);
      }
      if (absl::Status s = manager.Wait(); !s.ok()) return Fail(s);
      std::printf("stopped by signal %d at step %lld; final checkpoint written\n",
                  ckpt::StopSignal(), static_cast<long long>(done));
      return 0;
    }
  }
  if (absl::Status s = manager.Wait(); !s.ok()) return Fail(s);
  const ckpt::CheckpointManager::Costs costs = manager.last_costs();
  std::printf("done at step %lld; weights sha256 %s\n", static_cast<long long>(options.steps),
              WeightsDigest(model).c_str());
  std::printf(
      "last checkpoint: %llu bytes, copied in %.3f ms, training stalled %.3f ms, "
      "written in %.3f ms\n",
      static_cast<unsigned long long>(costs.bytes), costs.snapshot_seconds * 1000,
      costs.stall_seconds * 1000, costs.write_seconds * 1000);
  return 0;
}

}  // namespace pillar::torch_module
