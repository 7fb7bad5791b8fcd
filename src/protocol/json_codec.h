// Open Inference Protocol (KServe v2) JSON: decodes an infer request body into raw tensors and
// encodes responses. The decoder checks everything the protocol can check without the model
// (syntax, UTF-8, datatypes, shape against element count and nesting, value ranges); the model's
// own signature is checked later by the runner.
//
//   InferenceRequestDecoder decoder(DecodeLimits{});
//   absl::StatusOr<InferenceRequest> request = decoder.Decode(body);
//   std::string json = EncodeInferenceResponse(response);
// and, for pillar in front of another server, encodes requests and decodes that server's replies
// (EncodeInferenceRequest, InferenceResponseDecoder).
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

// An infer reply from another Open Inference Protocol server (an upstream): its outputs, checked
// as strictly as a request's inputs. A reply with an "error" member is refused even under a 200.
// Not thread-safe: use one per thread.
class InferenceResponseDecoder {
 public:
  explicit InferenceResponseDecoder(DecodeLimits limits = {});
  ~InferenceResponseDecoder();
  InferenceResponseDecoder(const InferenceResponseDecoder&) = delete;
  InferenceResponseDecoder& operator=(const InferenceResponseDecoder&) = delete;

  // InvalidArgument saying what is wrong with the reply.
  [[nodiscard]] absl::StatusOr<InferenceResponse> Decode(std::string_view body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string EncodeInferenceResponse(const InferenceResponse& response);
// The request as an upstream server reads it: the same JSON a client sends.
std::string EncodeInferenceRequest(const InferenceRequest& request);

// Appends the elements of `tensor` as a flat JSON array.
void AppendTensorData(std::string& out, const Tensor& tensor);

}  // namespace pillar::protocol
