// `pillar train`: the trainer lives in the LibTorch module (torch_module/train.cc); this
// command loads it and hands it the options.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "torch_module/torch_module.h"

namespace pillar::app {
namespace {

using TrainOptions = torch_module::TrainOptions;

int RunTrain(const TrainOptions& options) {
  absl::StatusOr<torch_module::TorchModule*> torch = torch_module::LoadTorchModule();
  if (!torch.ok()) {
    std::fprintf(stderr, "pillar train: %s\n", std::string(torch.status().message()).c_str());
    return 2;
  }
  return (*torch)->Train(options);
}

}  // namespace

void AddTrainCommand(CLI::App& cli, Commands& commands) {
  auto train = std::make_shared<TrainOptions>();
  CLI::App* cmd = cli.add_subcommand(
      "train", "Train the demo digits MLP with checkpoints; resumes from the newest good one");
  cmd->add_option("--run", train->run, "Checkpoint directory (the fast tier)")->required();
  cmd->add_option("--durable", train->durable, "A second, durable tier (shared file system)");
  cmd->add_option("--data", train->data, "Training rows (label + 64 pixels, CSV)");
  cmd->add_option("--steps", train->steps, "Steps in all")->check(CLI::PositiveNumber);
  cmd->add_option("--every", train->every, "Checkpoint every this many steps")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", train->seed, "Seed (weights and batches)");
  cmd->add_option("--batch", train->batch, "Rows per step")->check(CLI::Range(1, 65536));
  cmd->add_option("--lr", train->lr, "Learning rate");
  cmd->add_option("--keep-last", train->keep_last, "Checkpoints kept per tier")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--sync", train->sync, "Wait for each checkpoint before the next step");
  commands.On(cmd, [train] { return RunTrain(*train); });
}

}  // namespace pillar::app
