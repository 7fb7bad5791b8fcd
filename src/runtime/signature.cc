#include "runtime/signature.h"

#include <algorithm>

#include "common/strings.h"

namespace pillar::runtime {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return StrCat("[", JoinInts(shape, ","), "]");
}

}  // namespace

[[nodiscard]] absl::StatusOr<int64_t> CheckRequest(const models::ModelConfig& config,
                                                   protocol::InferenceRequest& request) {
  const bool batched = config.max_batch_size > 0;
  for (const protocol::Tensor& t : request.inputs) {
    if (std::none_of(config.inputs.begin(), config.inputs.end(),
                     [&](const models::TensorSpec& s) { return s.name == t.name; })) {
      return absl::InvalidArgumentError(StrCat("unknown input '", t.name, "'"));
    }
  }
  std::vector<protocol::Tensor> ordered;
  ordered.reserve(config.inputs.size());
  int64_t rows = -1;
  for (const models::TensorSpec& spec : config.inputs) {
    auto it = std::find_if(request.inputs.begin(), request.inputs.end(),
                           [&](const protocol::Tensor& t) { return t.name == spec.name; });
    if (it == request.inputs.end()) {
      return absl::InvalidArgumentError(StrCat("missing input '", spec.name, "'"));
    }
    if (it->datatype != spec.datatype) {
      return absl::InvalidArgumentError(
          StrCat("input '", spec.name, "': datatype ", protocol::DataTypeName(it->datatype),
                 " does not match the model's ", protocol::DataTypeName(spec.datatype)));
    }
    const size_t offset = batched ? 1 : 0;
    bool shape_ok = it->shape.size() == spec.shape.size() + offset;
    for (size_t i = 0; shape_ok && i < spec.shape.size(); ++i) {
      shape_ok = spec.shape[i] == -1 || spec.shape[i] == it->shape[i + offset];
    }
    if (!shape_ok) {
      return absl::InvalidArgumentError(StrCat(
          "input '", spec.name, "': shape ", ShapeText(it->shape), " does not match the model's ",
          batched ? "[-1," : "", ShapeText(spec.shape).substr(batched ? 1 : 0)));
    }
    // The decoder guarantees this for network input; runners may be called by other code.
    if (!it->DataFillsShape()) {
      return absl::InvalidArgumentError(StrCat("input '", spec.name, "': ", it->data.size(),
                                               " bytes of data do not fill shape ",
                                               ShapeText(it->shape)));
    }
    if (batched) {
      int64_t r = it->shape[0];
      if (r < 1 || r > config.max_batch_size) {
        return absl::InvalidArgumentError(StrCat("input '", spec.name, "': batch of ", r,
                                                 " rows is outside [1, ", config.max_batch_size,
                                                 "]"));
      }
      if (rows != -1 && r != rows) {
        return absl::InvalidArgumentError("inputs disagree on the batch dimension");
      }
      rows = r;
    }
    ordered.push_back(std::move(*it));
  }
  for (const std::string& name : request.requested_outputs) {
    if (std::none_of(config.outputs.begin(), config.outputs.end(),
                     [&](const models::TensorSpec& s) { return s.name == name; })) {
      return absl::InvalidArgumentError(StrCat("unknown output '", name, "'"));
    }
  }
  request.inputs = std::move(ordered);
  return batched ? rows : 1;
}

[[nodiscard]] absl::StatusOr<std::vector<protocol::Tensor>> MatchOutputs(
    const models::ModelConfig& config, int64_t rows, const std::vector<std::string>& requested,
    std::vector<protocol::Tensor> outputs) {
  for (const protocol::Tensor& t : outputs) {
    if (std::none_of(config.outputs.begin(), config.outputs.end(),
                     [&](const models::TensorSpec& s) { return s.name == t.name; })) {
      return absl::InvalidArgumentError(StrCat("undeclared output ", Quoted(t.name, 64)));
    }
  }
  std::vector<protocol::Tensor> matched;
  for (const models::TensorSpec& spec : config.outputs) {
    const bool wanted = requested.empty() ||
                        std::find(requested.begin(), requested.end(), spec.name) != requested.end();
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const protocol::Tensor& t) { return t.name == spec.name; });
    if (it == outputs.end()) {
      if (wanted) return absl::InvalidArgumentError(StrCat("no output '", spec.name, "'"));
      continue;
    }
    if (it->datatype != spec.datatype) {
      return absl::InvalidArgumentError(StrCat("output '", spec.name, "' is ",
                                               protocol::DataTypeName(it->datatype), ", not ",
                                               protocol::DataTypeName(spec.datatype)));
    }
    std::vector<int64_t> expected;
    if (config.max_batch_size > 0) expected.push_back(rows);
    expected.insert(expected.end(), spec.shape.begin(), spec.shape.end());
    bool shape_ok = it->shape.size() == expected.size();
    for (size_t d = 0; shape_ok && d < expected.size(); ++d) {
      shape_ok = expected[d] < 0 || expected[d] == it->shape[d];
    }
    if (!shape_ok) {
      return absl::InvalidArgumentError(
          StrCat("output '", spec.name, "' has a shape the model does not declare"));
    }
    if (!it->DataFillsShape()) {
      return absl::InvalidArgumentError(
          StrCat("output '", spec.name, "': its data does not fill its shape"));
    }
    if (wanted) matched.push_back(std::move(*it));
  }
  return matched;
}

}  // namespace pillar::runtime
