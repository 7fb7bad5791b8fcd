// Open Inference Protocol (KServe v2) JSON: decodes an infer request body into raw tensors and
// encodes responses. The decoder checks everything the protocol can check without the model
// (syntax, UTF-8, datatypes, shape against element count and nesting, value ranges); the model's
// own signature is checked later by the runner.
//
//   InferenceRequestDecoder decoder(DecodeLimits{});
//   absl::StatusOr<InferenceRequest> request = decoder.Decode(body);
//   std::string json = EncodeInferenceResponse(response);
// A decoder keeps a reusable parse buffer and is not thread-safe: use one per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "protocol/tensor.h"

namespace pillar::protocol {

struct DecodeLimits {
  int64_t max_elements_per_tensor = 64 * 1024 * 1024;
  size_t max_tensors = 256;
  size_t max_rank = 16;
  size_t max_nesting = 32;
};

class InferenceRequestDecoder {
 public:
  explicit InferenceRequestDecoder(DecodeLimits limits = {});
  ~InferenceRequestDecoder();
  InferenceRequestDecoder(const InferenceRequestDecoder&) = delete;
  InferenceRequestDecoder& operator=(const InferenceRequestDecoder&) = delete;

  // InvalidArgument with a message a client can act on when the body is not a valid request.
  [[nodiscard]] absl::StatusOr<InferenceRequest> Decode(std::string_view body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string EncodeInferenceResponse(const InferenceResponse& response);

// Appends the elements of `tensor` as a flat JSON array.
void AppendTensorData(std::string& out, const Tensor& tensor);

}  // namespace pillar::protocol
