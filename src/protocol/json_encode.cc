// The encoding half of json_codec.h (the decoders are json_codec.cc): tensors, replies and
// upstream requests as Open Inference Protocol JSON, written in place into one string.
#include <cstring>
#include <string>

#include "common/json_writer.h"
#include "protocol/json_codec.h"

namespace pillar::protocol {

namespace {

template <typename T, typename Emit>
void ForEachElement(const Tensor& tensor, Emit emit) {
  const char* p = tensor.data.data();
  size_t n = tensor.data.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    emit(v);
  }
}

}  // namespace

void AppendTensorData(std::string& out, const Tensor& tensor) {
  JsonWriter w(std::move(out));  // write in place: no copy of a large tensor's text
  w.BeginArray();
  switch (tensor.datatype) {
    case DataType::kBool:
      ForEachElement<uint8_t>(tensor, [&](uint8_t v) { w.Bool(v != 0); });
      break;
    case DataType::kUint8:
      ForEachElement<uint8_t>(tensor, [&](uint8_t v) { w.Uint(v); });
      break;
    case DataType::kUint16:
      ForEachElement<uint16_t>(tensor, [&](uint16_t v) { w.Uint(v); });
      break;
    case DataType::kUint32:
      ForEachElement<uint32_t>(tensor, [&](uint32_t v) { w.Uint(v); });
      break;
    case DataType::kUint64:
      ForEachElement<uint64_t>(tensor, [&](uint64_t v) { w.Uint(v); });
      break;
    case DataType::kInt8:
      ForEachElement<int8_t>(tensor, [&](int8_t v) { w.Int(v); });
      break;
    case DataType::kInt16:
      ForEachElement<int16_t>(tensor, [&](int16_t v) { w.Int(v); });
      break;
    case DataType::kInt32:
      ForEachElement<int32_t>(tensor, [&](int32_t v) { w.Int(v); });
      break;
    case DataType::kInt64:
      ForEachElement<int64_t>(tensor, [&](int64_t v) { w.Int(v); });
      break;
    case DataType::kFp32:
      ForEachElement<float>(tensor, [&](float v) { w.Float(v); });
      break;
    case DataType::kFp64:
      ForEachElement<double>(tensor, [&](double v) { w.Double(v); });
      break;
    case DataType::kBytes:
      // Whole elements only: a runner's malformed data ends the array early rather than read
      // past it (CheckRequest and MatchOutputs refuse such data before it gets here).
      (void)ForEachBytesElement(tensor.data, [&](std::string_view element) {
        w.String(element);
        return true;
      });
      break;
  }
  w.EndArray();
  out = std::move(w).Take();
}

namespace {

// `tensors` as the elements of a JSON array (without the brackets).
void AppendTensors(std::string& out, const std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (i > 0) out.push_back(',');
    out.append("{\"name\":");
    AppendJsonString(out, t.name);
    out.append(",\"datatype\":\"");
    out.append(DataTypeName(t.datatype));
    out.append("\",\"shape\":[");
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) out.push_back(',');
      out.append(std::to_string(t.shape[d]));
    }
    out.append("],\"data\":");
    AppendTensorData(out, t);
    out.push_back('}');
  }
}

}  // namespace

std::string EncodeInferenceResponse(const InferenceResponse& response) {
  std::string out;
  out.reserve(256);
  out.append("{\"model_name\":");
  AppendJsonString(out, response.model_name);
  out.append(",\"model_version\":");
  AppendJsonString(out, response.model_version);
  if (!response.id.empty()) {
    out.append(",\"id\":");
    AppendJsonString(out, response.id);
  }
  out.append(",\"outputs\":[");
  AppendTensors(out, response.outputs);
  out.append("]}");
  return out;
}

std::string EncodeInferenceRequest(const InferenceRequest& request) {
  std::string out;
  out.reserve(256);
  out.push_back('{');
  if (!request.id.empty()) {
    out.append("\"id\":");
    AppendJsonString(out, request.id);
    out.push_back(',');
  }
  out.append("\"inputs\":[");
  AppendTensors(out, request.inputs);
  out.push_back(']');
  if (!request.requested_outputs.empty()) {
    out.append(",\"outputs\":[");
    for (size_t i = 0; i < request.requested_outputs.size(); ++i) {
      out.append(i == 0 ? "{\"name\":" : ",{\"name\":");
      AppendJsonString(out, request.requested_outputs[i]);
      out.push_back('}');
    }
    out.push_back(']');
  }
  out.push_back('}');
  return out;
}

}  // namespace pillar::protocol
