// Checks an inference request against a model's declared inputs and outputs before it is queued,
// so a bad request is refused with a precise message and never reaches a framework.
//
//   PILLAR_ASSIGN_OR_RETURN(int64_t rows, CheckRequest(config, request));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_config.h"
#include "protocol/tensor.h"

namespace pillar::runtime {

// Reorders `request.inputs` into the config's input order and returns the batch rows (1 for a
// model that does not batch). InvalidArgument names the input and what is wrong.
[[nodiscard]] absl::StatusOr<int64_t> CheckRequest(const models::ModelConfig& config,
                                                   protocol::InferenceRequest& request);

// The outputs another model server answered with, checked against the model's: each one declared
// (none other), of its datatype and shape (the batch dimension `rows` when the model batches), and
// every one `requested` (all when empty) present. Returns the wanted ones in declared order;
// InvalidArgument names the output and what is wrong.
[[nodiscard]] absl::StatusOr<std::vector<protocol::Tensor>> MatchOutputs(
    const models::ModelConfig& config, int64_t rows, const std::vector<std::string>& requested,
    std::vector<protocol::Tensor> outputs);

}  // namespace pillar::runtime
