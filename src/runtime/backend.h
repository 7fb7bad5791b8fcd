// One model instance that executes whole batches synchronously: the LibTorch module, or a test
// double. The BatchingRunner owns several and calls each from its own thread only.
//
//   absl::StatusOr<std::vector<Tensor>> out = backend.Execute(inputs);
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "protocol/tensor.h"

namespace pillar::runtime {

class Backend {
 public:
  virtual ~Backend() = default;
  // `inputs` are in the model's declared input order, with the batch as dimension 0 when the
  // model batches. Returns the outputs in declared output order, with the same batch rows.
  [[nodiscard]] virtual absl::StatusOr<std::vector<protocol::Tensor>> Execute(
      std::vector<protocol::Tensor>& inputs) = 0;
  // Called from another thread when the model unloads: an Execute that is waiting should return
  // soon (any error). The default does nothing: a TorchScript execution runs to its end.
  virtual void Interrupt() {}
};

}  // namespace pillar::runtime
