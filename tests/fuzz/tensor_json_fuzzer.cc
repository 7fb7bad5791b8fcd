// Fuzzes the Open Inference Protocol JSON decoder, the signature check against a model, and
// the response encoder: whatever the body, decoding either fails with InvalidArgument or gives
// tensors whose bytes match their shape and datatype, and re-encoding them never fails; BYTES
// tensors (strings) read back from their encoding byte for byte.
#include <cstdint>
#include <string_view>

#include "models/model_config.h"
#include "protocol/json_codec.h"
#include "runtime/signature.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pillar::protocol::InferenceRequestDecoder decoder(
      pillar::protocol::DecodeLimits{.max_elements_per_tensor = 1 << 20});
  static const pillar::models::ModelConfig config = *pillar::models::ModelConfig::Parse(
      "platform = \"torchscript\"\nmax_batch_size = 8\n"
      "[[input]]\nname = \"pixels\"\ndatatype = \"FP32\"\nshape = [4]\n"
      "[[output]]\nname = \"probabilities\"\ndatatype = \"FP32\"\nshape = [2]\n",
      "fuzz");
  absl::StatusOr<pillar::protocol::InferenceRequest> request =
      decoder.Decode(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  pillar::protocol::InferenceResponse response;
  for (const auto& tensor : request->inputs) {
    if (!tensor.DataFillsShape()) __builtin_trap();
    const auto all = pillar::protocol::ElementRange(tensor, 0, tensor.ElementCount());
    if (!all || all->first != 0 || all->second != tensor.data.size()) __builtin_trap();
    response.outputs.push_back(tensor);
  }
  std::string encoded = pillar::protocol::EncodeInferenceResponse(response);
  if (encoded.empty()) __builtin_trap();
  static pillar::protocol::InferenceResponseDecoder replies(
      pillar::protocol::DecodeLimits{.max_elements_per_tensor = 1 << 20});
  absl::StatusOr<pillar::protocol::InferenceResponse> back = replies.Decode(encoded);
  if (!back.ok() || back->outputs.size() != response.outputs.size()) __builtin_trap();
  for (size_t i = 0; i < back->outputs.size(); ++i) {
    if (response.outputs[i].datatype == pillar::protocol::DataType::kBytes &&
        back->outputs[i].data != response.outputs[i].data) {
      __builtin_trap();
    }
  }
  (void)pillar::runtime::CheckRequest(config, *request);
  return 0;
}
