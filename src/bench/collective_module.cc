// The collective module's entry point: libpillar_collective.so exports one symbol, which
// returns the CollectiveModule that opens Open MPI and Gloo communicators (collective_module.h).
#include "bench/collective_module.h"

#include "bench/open_communicator.h"

namespace pillar::bench {
namespace {

class Module final : public CollectiveModule {
 public:
  int abi_version() const override { return kCollectiveModuleAbiVersion; }
  std::string_view pillar_version() const override { return PILLAR_VERSION; }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> Open(
      const CollectiveOptions& options) override {
    return OpenCommunicator(options);
  }
};

}  // namespace
}  // namespace pillar::bench

extern "C" __attribute__((visibility("default"))) pillar::bench::CollectiveModule*
pillar_collective_module_v1() {
  static pillar::bench::Module* module = new pillar::bench::Module;
  return module;
}
