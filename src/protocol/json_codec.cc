#include "protocol/json_codec.h"

#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::protocol {
namespace {

// The longest tensor name an error message quotes (whole; a longer one by its length).
constexpr size_t kShownName = 64;

using simdjson::dom::element;
using simdjson::dom::element_type;

[[nodiscard]] absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(ToAbsl(what));
}

template <typename T>
void AppendRaw(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "raw tensors are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
[[nodiscard]] absl::Status AppendInteger(std::string& out, element value) {
  if constexpr (std::is_signed_v<T>) {
    int64_t v;
    if (value.type() == element_type::INT64) {
      v = value.get_int64().value_unsafe();
    } else if (value.type() == element_type::UINT64) {
      return Invalid("is out of range");
    } else {
      return Invalid("is not an integer");
    }
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      return Invalid("is out of range");
    }
    AppendRaw<T>(out, static_cast<T>(v));
  } else {
    uint64_t v;
    if (value.type() == element_type::UINT64) {
      v = value.get_uint64().value_unsafe();
    } else if (value.type() == element_type::INT64) {
      int64_t s = value.get_int64().value_unsafe();
      if (s < 0) return Invalid("is out of range");
      v = static_cast<uint64_t>(s);
    } else {
      return Invalid("is not an integer");
    }
    if (v > std::numeric_limits<T>::max()) return Invalid("is out of range");
    AppendRaw<T>(out, static_cast<T>(v));
  }
  return absl::OkStatus();
}

template <typename T>
[[nodiscard]] absl::Status AppendFloat(std::string& out, element value) {
  double v;
  switch (value.type()) {
    case element_type::DOUBLE:
      v = value.get_double().value_unsafe();
      break;
    case element_type::INT64:
      v = static_cast<double>(value.get_int64().value_unsafe());
      break;
    case element_type::UINT64:
      v = static_cast<double>(value.get_uint64().value_unsafe());
      break;
    default:
      return Invalid("is not a number");
  }
  if constexpr (std::is_same_v<T, float>) {
    // What rounds to FP32's largest value is in range: below 2^128 - 2^103, the midpoint
    // between it and 2^128 (review helper-126: 3.4028235e38, the text pillar writes for that
    // value, was refused, so a pillar in front of another turned its answers into 502s).
    constexpr double kRoundsToInfinity = 0x1.ffffffp+127;
    if (!(std::abs(v) < kRoundsToInfinity)) return Invalid("is out of range for FP32");
  }
  AppendRaw<T>(out, static_cast<T>(v));
  return absl::OkStatus();
}

[[nodiscard]] absl::Status AppendElement(std::string& out, DataType type, element value) {
  switch (type) {
    case DataType::kBool:
      if (value.type() != element_type::BOOL) return Invalid("is not a boolean");
      out.push_back(value.get_bool().value_unsafe() ? 1 : 0);
      return absl::OkStatus();
    case DataType::kUint8:
      return AppendInteger<uint8_t>(out, value);
    case DataType::kUint16:
      return AppendInteger<uint16_t>(out, value);
    case DataType::kUint32:
      return AppendInteger<uint32_t>(out, value);
    case DataType::kUint64:
      return AppendInteger<uint64_t>(out, value);
    case DataType::kInt8:
      return AppendInteger<int8_t>(out, value);
    case DataType::kInt16:
      return AppendInteger<int16_t>(out, value);
    case DataType::kInt32:
      return AppendInteger<int32_t>(out, value);
    case DataType::kInt64:
      return AppendInteger<int64_t>(out, value);
    case DataType::kFp32:
      return AppendFloat<float>(out, value);
    case DataType::kFp64:
      return AppendFloat<double>(out, value);
    case DataType::kBytes: {
      // JSON carries text only: a string (the parser checked its UTF-8).
      std::string_view text;
      if (value.get_string().get(text) != simdjson::SUCCESS) return Invalid("is not a string");
      if (text.size() > kMaxBytesElement) return Invalid("is too long");
      AppendBytesElement(out, text);
      return absl::OkStatus();
    }
  }
  return Invalid("has an unknown datatype");
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) StrAppend(&out, i > 0 ? "," : "", shape[i]);
  out.push_back(']');
  return out;
}

// Turns `data` into row-major bytes. The protocol allows two spellings: flat (one array of
// every element) or nested like the shape. Nested data must match the shape exactly, level by
// level: counting its leaves alone let `[[63],[[[1]]]]` pass for shape [1,64], so a client (or
// a proxy that validates JSON by the shape) and pillar could disagree about which element is
// where.
struct DataWalker {
  DataType type;
  const std::vector<int64_t>& shape;
  int64_t expected;
  size_t max_nesting;
  std::string& out;
  int64_t count = 0;
  std::vector<size_t> index = {};  // where WalkNested is, for error messages

  [[nodiscard]] absl::Status Walk(element data) {
    if (!IsNested(data)) return WalkFlat(data);
    return WalkNested(data);
  }

 private:
  // Nested when the first entry is an array; flat data holding an array later is refused.
  static bool IsNested(element data) {
    simdjson::dom::array entries;
    if (data.get_array().get(entries) != simdjson::SUCCESS) return false;
    auto first = entries.begin();
    return first != entries.end() && (*first).type() == element_type::ARRAY;
  }

  // A single value, or an array of values: only the count has to match the shape.
  [[nodiscard]] absl::Status WalkFlat(element data) {
    simdjson::dom::array entries;
    if (data.get_array().get(entries) != simdjson::SUCCESS) return AppendLeaf(data);
    for (element entry : entries) {
      if (count >= expected) return Invalid("'data' has more elements than 'shape' allows");
      if (entry.type() == element_type::ARRAY) {
        return Invalid(StrCat("'data' mixes values and arrays: data[0] is a value, data[", count,
                              "] an array; send it flat or nested like 'shape' ",
                              ShapeText(shape)));
      }
      PILLAR_RETURN_IF_ERROR(AppendLeaf(entry));
    }
    return absl::OkStatus();
  }

  // The array at depth d must have shape[d] entries, and values sit at depth rank exactly.
  [[nodiscard]] absl::Status WalkNested(element value) {
    const size_t depth = index.size();
    if (depth == shape.size()) {
      if (value.type() == element_type::ARRAY) {
        return Invalid(StrCat("'data' is nested too deeply: ", Path(), " is an array, but 'shape' ",
                              ShapeText(shape), " has ", shape.size(), " dimensions"));
      }
      return AppendLeaf(value);
    }
    if (depth >= max_nesting) return Invalid("'data' is nested too deeply");
    simdjson::dom::array entries;
    if (value.get_array().get(entries) != simdjson::SUCCESS) {
      return Invalid(StrCat("'data' is not nested deeply enough: ", Path(),
                            " is a value, but dimension ", depth, " of 'shape' ", ShapeText(shape),
                            " needs an array of ", shape[depth]));
    }
    const size_t size = entries.size();
    if (int64_t(size) != shape[depth]) {
      return Invalid(StrCat("nested 'data' does not match 'shape' ", ShapeText(shape), ": ", Path(),
                            " has ", size, " entries, but dimension ", depth, " is ",
                            shape[depth]));
    }
    index.push_back(0);
    for (element entry : entries) {
      PILLAR_RETURN_IF_ERROR(WalkNested(entry));
      ++index.back();
    }
    index.pop_back();
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status AppendLeaf(element value) {
    absl::Status s = AppendElement(out, type, value);
    if (!s.ok()) {
      return Invalid(
          StrCat("'data' element ", count, " ", s.message(), " for datatype ", DataTypeName(type)));
    }
    ++count;
    return absl::OkStatus();
  }

  // "data[1][0]": the array or value the message is about.
  std::string Path() const {
    std::string path = "data";
    for (size_t i : index) StrAppend(&path, "[", i, "]");
    return path;
  }
};

[[nodiscard]] absl::StatusOr<std::string_view> GetString(element value, std::string_view what) {
  std::string_view s;
  if (value.get_string().get(s) != simdjson::SUCCESS) {
    return Invalid(StrCat("'", what, "' must be a string"));
  }
  return s;
}

[[nodiscard]] absl::Status Prefix(std::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), StrCat(prefix, s.message()));
}

// One tensor object of 'inputs' (a request) or 'outputs' (a reply); `what` is "input" or
// "output". `body_size` bounds what is reserved before the elements are counted.
[[nodiscard]] absl::StatusOr<Tensor> DecodeTensor(element value, std::string_view what,
                                                  const DecodeLimits& limits, size_t body_size) {
  simdjson::dom::object object;
  if (value.get_object().get(object) != simdjson::SUCCESS) {
    return Invalid(StrCat("each entry of '", what, "s' must be an object"));
  }
  Tensor tensor;
  bool has_name = false, has_shape = false, has_type = false;
  element data;
  bool has_data = false;
  for (auto field : object) {
    if (field.key == "name") {
      if (has_name) return Invalid("duplicate key 'name'");
      PILLAR_ASSIGN_OR_RETURN(std::string_view name, GetString(field.value, "name"));
      tensor.name = std::string(name);
      has_name = true;
    } else if (field.key == "datatype") {
      if (has_type) return Invalid("duplicate key 'datatype'");
      PILLAR_ASSIGN_OR_RETURN(std::string_view type, GetString(field.value, "datatype"));
      PILLAR_ASSIGN_OR_RETURN(tensor.datatype, ParseDataType(type));
      has_type = true;
    } else if (field.key == "shape") {
      if (has_shape) return Invalid("duplicate key 'shape'");
      simdjson::dom::array dims;
      if (field.value.get_array().get(dims) != simdjson::SUCCESS) {
        return Invalid("'shape' must be an array of non-negative integers");
      }
      for (element dim : dims) {
        int64_t d;
        if (dim.get_int64().get(d) != simdjson::SUCCESS || d < 0) {
          return Invalid("'shape' must be an array of non-negative integers");
        }
        if (tensor.shape.size() == limits.max_rank)
          return Invalid("'shape' has too many dimensions");
        tensor.shape.push_back(d);
      }
      has_shape = true;
    } else if (field.key == "data") {
      if (has_data) return Invalid("duplicate key 'data'");
      data = field.value;
      has_data = true;
    }
    // "parameters" and extensions are accepted and ignored.
  }
  if (!has_name) return Invalid(StrCat("an ", what, " has no 'name'"));
  std::string prefix = StrCat(what, " ", Quoted(tensor.name, kShownName), ": ");
  if (!has_type) return Invalid(prefix + "missing 'datatype'");
  if (!has_shape) return Invalid(prefix + "missing 'shape'");
  if (!has_data) return Invalid(prefix + "missing 'data'");
  std::optional<int64_t> count = ShapeElementCount(tensor.shape, limits.max_elements_per_tensor);
  if (!count || *count > limits.max_elements_per_tensor) {
    return Invalid(prefix + "'shape' describes more elements than allowed");
  }
  // Reserve what the shape needs, but never more than the body could hold (an element takes
  // at least two bytes of JSON, "0,"): a 60-byte body claiming a huge shape must not make
  // the server allocate gigabytes before the element count is found wrong.
  const int64_t possible = std::min<int64_t>(*count, int64_t(body_size / 2) + 1);
  tensor.data.reserve(static_cast<size_t>(possible) * ElementSize(tensor.datatype));
  DataWalker walker{tensor.datatype, tensor.shape, *count, limits.max_nesting, tensor.data};
  if (absl::Status s = walker.Walk(data); !s.ok()) return Prefix(prefix, s);
  if (walker.count != *count) {
    return Invalid(
        StrCat(prefix, "'data' has ", walker.count, " elements but 'shape' needs ", *count));
  }
  return tensor;
}

}  // namespace

struct InferenceRequestDecoder::Impl {
  DecodeLimits limits;
  simdjson::dom::parser parser;
  size_t body_size = 0;  // of the body being decoded

  [[nodiscard]] absl::StatusOr<InferenceRequest> Decode(std::string_view body) {
    body_size = body.size();
    element root;
    if (auto error = parser.parse(body.data(), body.size()).get(root); error != simdjson::SUCCESS) {
      return Invalid(StrCat("malformed JSON: ", simdjson::error_message(error)));
    }
    simdjson::dom::object object;
    if (root.get_object().get(object) != simdjson::SUCCESS) {
      return Invalid("the request body must be a JSON object");
    }
    InferenceRequest request;
    bool has_inputs = false, has_id = false, has_outputs = false;
    for (auto field : object) {
      if (field.key == "id") {
        if (has_id) return Invalid("duplicate key 'id'");
        PILLAR_ASSIGN_OR_RETURN(std::string_view id, GetString(field.value, "id"));
        request.id = std::string(id);
        has_id = true;
      } else if (field.key == "inputs") {
        if (has_inputs) return Invalid("duplicate key 'inputs'");
        simdjson::dom::array inputs;
        if (field.value.get_array().get(inputs) != simdjson::SUCCESS) {
          return Invalid("'inputs' must be an array");
        }
        for (element input : inputs) {
          if (request.inputs.size() == limits.max_tensors) return Invalid("too many inputs");
          PILLAR_ASSIGN_OR_RETURN(Tensor tensor, DecodeTensor(input, "input", limits, body_size));
          for (const Tensor& other : request.inputs) {
            if (other.name == tensor.name) {
              return Invalid(StrCat("input ", Quoted(tensor.name, kShownName), " appears twice"));
            }
          }
          request.inputs.push_back(std::move(tensor));
        }
        has_inputs = true;
      } else if (field.key == "outputs") {
        if (has_outputs) return Invalid("duplicate key 'outputs'");
        simdjson::dom::array outputs;
        if (field.value.get_array().get(outputs) != simdjson::SUCCESS) {
          return Invalid("'outputs' must be an array");
        }
        for (element output : outputs) {
          element name;
          if (output.at_key("name").get(name) != simdjson::SUCCESS) {
            return Invalid("each entry of 'outputs' must be an object with a 'name'");
          }
          PILLAR_ASSIGN_OR_RETURN(std::string_view n, GetString(name, "name"));
          if (request.requested_outputs.size() == limits.max_tensors)
            return Invalid("too many outputs");
          request.requested_outputs.emplace_back(n);
        }
        has_outputs = true;
      }
    }
    if (!has_inputs) return Invalid("missing 'inputs'");
    if (request.inputs.empty()) return Invalid("'inputs' is empty");
    return request;
  }
};

struct InferenceResponseDecoder::Impl {
  DecodeLimits limits;
  simdjson::dom::parser parser;

  [[nodiscard]] absl::Status ReadOutputs(element value, size_t body_size,
                                         InferenceResponse& response) {
    simdjson::dom::array outputs;
    if (value.get_array().get(outputs) != simdjson::SUCCESS) {
      return Invalid("'outputs' must be an array");
    }
    for (element output : outputs) {
      if (response.outputs.size() == limits.max_tensors) return Invalid("too many outputs");
      PILLAR_ASSIGN_OR_RETURN(Tensor tensor, DecodeTensor(output, "output", limits, body_size));
      for (const Tensor& other : response.outputs) {
        if (other.name == tensor.name) {
          return Invalid(StrCat("output ", Quoted(tensor.name, kShownName), " appears twice"));
        }
      }
      response.outputs.push_back(std::move(tensor));
    }
    return absl::OkStatus();
  }

  [[nodiscard]] absl::StatusOr<InferenceResponse> Decode(std::string_view body) {
    element root;
    if (auto error = parser.parse(body.data(), body.size()).get(root); error != simdjson::SUCCESS) {
      return Invalid(StrCat("malformed JSON: ", simdjson::error_message(error)));
    }
    simdjson::dom::object object;
    if (root.get_object().get(object) != simdjson::SUCCESS) {
      return Invalid("the reply must be a JSON object");
    }
    InferenceResponse response;
    bool has_outputs = false, has_name = false, has_version = false, has_id = false;
    for (auto field : object) {
      if (field.key == "error") {
        // A server that reports a failure with a success status.
        std::string_view message;
        if (field.value.get_string().get(message) != simdjson::SUCCESS) message = "(not a string)";
        // Quoted whole or not at all: a value cut short is one no screen would recognize
        // (pillar redacts what it quotes, guard::RedactAll).
        return Invalid(message.size() <= 1024
                           ? StrCat("the reply carries an error: ", message)
                           : StrCat("the reply carries an error (", message.size(),
                                    " bytes, too long to quote)"));
      }
      bool* seen = field.key == "outputs"         ? &has_outputs
                   : field.key == "model_name"    ? &has_name
                   : field.key == "model_version" ? &has_version
                   : field.key == "id"            ? &has_id
                                                  : nullptr;
      if (seen == nullptr) continue;  // "parameters" and extensions
      if (*seen) return Invalid(StrCat("duplicate key '", field.key, "'"));
      *seen = true;
      if (field.key == "outputs") {
        PILLAR_RETURN_IF_ERROR(ReadOutputs(field.value, body.size(), response));
        continue;
      }
      PILLAR_ASSIGN_OR_RETURN(std::string_view text, GetString(field.value, field.key));
      std::string& out = field.key == "model_name"      ? response.model_name
                         : field.key == "model_version" ? response.model_version
                                                        : response.id;
      out = std::string(text);
    }
    if (!has_outputs) return Invalid("missing 'outputs'");
    return response;
  }
};

InferenceResponseDecoder::InferenceResponseDecoder(DecodeLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
}

InferenceResponseDecoder::~InferenceResponseDecoder() = default;

absl::StatusOr<InferenceResponse> InferenceResponseDecoder::Decode(std::string_view body) {
  return impl_->Decode(body);
}

InferenceRequestDecoder::InferenceRequestDecoder(DecodeLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
}

InferenceRequestDecoder::~InferenceRequestDecoder() = default;

absl::StatusOr<InferenceRequest> InferenceRequestDecoder::Decode(std::string_view body) {
  return impl_->Decode(body);
}

}  // namespace pillar::protocol
