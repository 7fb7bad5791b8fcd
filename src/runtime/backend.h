// One model instance that executes whole batches synchronously: the LibTorch module, or a test
// double. The BatchingRunner owns several and calls each from one thread at a time: its own, or
// the thread of a lone request it runs inline (MayRunInline).
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
  // Whether an execution is short and cannot hang, so that a lone request may run it on the
  // caller's thread (an event loop) instead of paying two thread hand-offs (BatchingRunner).
  // False unless a backend says so: a test double that blocks must not block its caller.
  virtual bool MayRunInline() const { return false; }
};

}  // namespace pillar::runtime
