// `pillar train` and `pillar ckpt` in a build without LibTorch (-DPILLAR_WITH_TORCH=OFF): the
// checkpoint library itself needs no LibTorch, but these commands convert tensors.
#include <cstdio>

#include "app/commands.h"

namespace pillar::app {
namespace {

int Disabled() {
  std::fprintf(stderr, "pillar: this build has no LibTorch (-DPILLAR_WITH_TORCH=OFF)\n");
  return 2;
}

}  // namespace

int RunTrain(const TrainOptions&) { return Disabled(); }
int RunCkptList(const CkptOptions&) { return Disabled(); }
int RunCkptShow(const CkptOptions&) { return Disabled(); }
int RunCkptVerify(const CkptOptions&) { return Disabled(); }
int RunCkptRestore(const CkptOptions&) { return Disabled(); }
int RunCkptPrune(const CkptOptions&) { return Disabled(); }
int RunCkptExport(const CkptOptions&) { return Disabled(); }
int RunCkptImport(const CkptOptions&) { return Disabled(); }
int RunCkptInterval(const CkptOptions&) { return Disabled(); }

}  // namespace pillar::app
