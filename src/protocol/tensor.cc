#include "protocol/tensor.h"

namespace pillar::protocol {

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

}  // namespace pillar::protocol
