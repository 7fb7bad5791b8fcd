// A named, typed, shaped tensor as it crosses the protocol: the elements are stored as raw
// little-endian bytes of `datatype`, row-major, so runners can hand them to a framework without
// another conversion. A BYTES element is its length as 4 little-endian bytes, then its bytes
// (the layout of Triton's and KServe's binary tensor data), so a tensor's data is still the
// concatenation of its rows.
//
//   Tensor t{"pixels", DataType::kFp32, {1, 64}, bytes};
//   int64_t n = t.ElementCount();  // 64
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/cancellation.h"
#include "protocol/datatype.h"

namespace pillar::protocol {

struct Tensor {
  std::string name;
  DataType datatype = DataType::kFp32;
  std::vector<int64_t> shape;
  std::string data;  // ElementCount() * ElementSize(datatype) bytes

  // Product of the dimensions; an empty shape is a scalar of one element.
  int64_t ElementCount() const;
  // Whether `data` holds exactly ElementCount() whole elements.
  bool DataFillsShape() const;
};

// The largest BYTES element: its length must fit the 4-byte prefix.
inline constexpr size_t kMaxBytesElement = 0xffffffffu;

// Appends one BYTES element (`element.size()` <= kMaxBytesElement) to a tensor's data.
void AppendBytesElement(std::string& data, std::string_view element);

// Calls `fn` with each element of BYTES data, in order, until it returns false. False when the
// data is not a run of whole elements (a length that runs past the end), whatever `fn` saw.
[[nodiscard]] bool ForEachBytesElement(std::string_view data,
                                       absl::FunctionRef<bool(std::string_view)> fn);

// The byte range [begin, end) of `tensor.data` that holds elements [first, first + count), for
// any datatype; nullopt when they are not all in it.
std::optional<std::pair<size_t, size_t>> ElementRange(const Tensor& tensor, int64_t first,
                                                      int64_t count);

// Product of `shape`, or nullopt when a dimension is negative or the product overflows
// `limit`.
std::optional<int64_t> ShapeElementCount(const std::vector<int64_t>& shape, int64_t limit);

// An inference request after decoding: the inputs, and which outputs the caller wants (empty
// means all).
// A request's class under load (runtime/admission.h): the lower class is refused first.
enum class Priority : uint8_t { kHigh = 0, kNormal = 1, kLow = 2 };

struct InferenceRequest {
  std::string id;
  // Not part of the body: when the caller stops waiting (steady-clock nanoseconds, as
  // Clock::MonotonicNanos counts them; 0: no deadline of its own). Runners do not start work
  // for a request past it, and a remote one tells its upstream what is left.
  int64_t deadline_ns = 0;
  Priority priority = Priority::kNormal;  // not part of the body either
  // Who asks (a hash of the principal and its connection; 0: unknown), so that a queue that told
  // a caller to come back can keep a place for it (runtime/return_promises.h). Not part of the
  // body.
  uint64_t caller = 0;
  uint64_t principal = 0;  // a hash of the principal alone (0: unknown)
  // Set when the caller may go away before the answer (a client on a connection): a runner that
  // can stop its work for it does so when this is cancelled. Not part of the body.
  std::shared_ptr<Cancellation> cancellation;
  std::vector<Tensor> inputs;
  std::vector<std::string> requested_outputs;
};

struct InferenceResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<Tensor> outputs;
};

}  // namespace pillar::protocol
