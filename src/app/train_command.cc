// `pillar train`: the trainer lives in the LibTorch module (torch_module/train.cc); this
// command loads it and hands it the options.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "torch_module/torch_module.h"

namespace pillar::app {

int RunTrain(const TrainOptions& options) {
  absl::StatusOr<torch_module::TorchModule*> torch = torch_module::LoadTorchModule();
  if (!torch.ok()) {
    std::fprintf(stderr, "pillar train: %s\n", std::string(torch.status().message()).c_str());
    return 2;
  }
  return (*torch)->Train(options);
}

}  // namespace pillar::app
