// Fuzzes the decoder of an upstream's infer reply (protocol::InferenceResponseDecoder): a model
// server's reply is untrusted input. A reply that decodes re-encodes into one that decodes to
// tensors of the same names, datatypes, shapes and sizes, each filling its shape, and BYTES
// tensors of the same bytes.
#include <cstdint>
#include <string_view>

#include "protocol/datatype.h"
#include "protocol/json_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pillar::protocol::InferenceResponse;
  static pillar::protocol::InferenceResponseDecoder decoder(
      pillar::protocol::DecodeLimits{.max_elements_per_tensor = 1 << 20});
  absl::StatusOr<InferenceResponse> reply =
      decoder.Decode(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!reply.ok()) return 0;
  for (const pillar::protocol::Tensor& t : reply->outputs) {
    if (!t.DataFillsShape()) __builtin_trap();
  }
  const InferenceResponse first = std::move(*reply);
  absl::StatusOr<InferenceResponse> again =
      decoder.Decode(pillar::protocol::EncodeInferenceResponse(first));
  if (!again.ok() || again->outputs.size() != first.outputs.size()) __builtin_trap();
  for (size_t i = 0; i < first.outputs.size(); ++i) {
    const pillar::protocol::Tensor& a = first.outputs[i];
    const pillar::protocol::Tensor& b = again->outputs[i];
    if (a.name != b.name || a.datatype != b.datatype || a.shape != b.shape ||
        a.data.size() != b.data.size() ||
        // BYTES read back byte for byte (numbers need not: -0.0 is written "-0", read as 0).
        (a.datatype == pillar::protocol::DataType::kBytes && a.data != b.data)) {
      __builtin_trap();
    }
  }
  return 0;
}
