#include "protocol/tensor.h"

#include <cstring>

namespace pillar::protocol {
namespace {

constexpr size_t kLengthBytes = 4;

// The length at data[at], or nullopt when the 4 bytes are not all there.
std::optional<size_t> LengthAt(std::string_view data, size_t at) {
  if (data.size() - at < kLengthBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data() + at);
  return size_t(p[0]) | size_t(p[1]) << 8 | size_t(p[2]) << 16 | size_t(p[3]) << 24;
}

}  // namespace

std::optional<int64_t> ShapeElementCount(const std::vector<int64_t>& shape, int64_t limit) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && count > limit / dim) return std::nullopt;
    count *= dim;
  }
  return count;
}

int64_t Tensor::ElementCount() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

bool Tensor::DataFillsShape() const {
  if (datatype != DataType::kBytes) {
    return int64_t(data.size()) == ElementCount() * int64_t(ElementSize(datatype));
  }
  int64_t count = 0;
  return ForEachBytesElement(data, [&](std::string_view) { return ++count, true; }) &&
         count == ElementCount();
}

void AppendBytesElement(std::string& data, std::string_view element) {
  const uint32_t n = uint32_t(element.size());
  const char length[kLengthBytes] = {char(n & 0xff), char(n >> 8 & 0xff), char(n >> 16 & 0xff),
                                     char(n >> 24)};
  data.append(length, kLengthBytes);
  data.append(element);
}

bool ForEachBytesElement(std::string_view data, absl::FunctionRef<bool(std::string_view)> fn) {
  size_t at = 0;
  while (at < data.size()) {
    const std::optional<size_t> n = LengthAt(data, at);
    if (!n || data.size() - at - kLengthBytes < *n) return false;
    if (!fn(data.substr(at + kLengthBytes, *n))) return true;
    at += kLengthBytes + *n;
  }
  return true;
}

std::optional<std::pair<size_t, size_t>> ElementRange(const Tensor& tensor, int64_t first,
                                                      int64_t count) {
  if (first < 0 || count < 0 || first > tensor.ElementCount() - count) return std::nullopt;
  if (tensor.datatype != DataType::kBytes) {
    const size_t size = ElementSize(tensor.datatype);
    const size_t begin = size_t(first) * size, end = size_t(first + count) * size;
    if (end > tensor.data.size()) return std::nullopt;
    return std::make_pair(begin, end);
  }
  std::string_view data = tensor.data;
  size_t at = 0, begin = 0;
  for (int64_t i = 0; i < first + count; ++i) {
    if (i == first) begin = at;
    const std::optional<size_t> n = LengthAt(data, at);
    if (!n || data.size() - at - kLengthBytes < *n) return std::nullopt;
    at += kLengthBytes + *n;
  }
  return std::make_pair(count == 0 ? at : begin, at);
}

}  // namespace pillar::protocol
