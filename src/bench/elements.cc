#include "bench/elements.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace pillar::bench {

uint16_t HalfFromFloat(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): shift the mantissa with its implicit bit into place.
    if (abs < 0x33000000u) return uint16_t(sign);
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // value = mantissa * 2^(exponent - 150)
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return uint16_t(sign | half);
}

float FloatFromHalf(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t x;
  if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    x = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t Bfloat16FromFloat(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

float FloatFromBfloat16(uint16_t b) {
  const uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <typename T>
double Load(const T& v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatFromHalf(v.bits);
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return FloatFromBfloat16(v.bits);
  } else {
    return double(v);
  }
}

template <typename T>
T Make(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return {HalfFromFloat(float(v))};
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return {Bfloat16FromFloat(float(v))};
  } else if constexpr (std::is_integral_v<T>) {
    // Modular, as the integer reductions of the libraries are.
    return T(int64_t(std::llround(v)));
  } else {
    return T(v);
  }
}

// Calls fn(T{}) with T the buffer's element type.
template <typename Fn>
auto Dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kInt8:
      return fn(int8_t{});
    case DataType::kUint8:
      return fn(uint8_t{});
    case DataType::kInt32:
      return fn(int32_t{});
    case DataType::kUint32:
      return fn(uint32_t{});
    case DataType::kInt64:
      return fn(int64_t{});
    case DataType::kUint64:
      return fn(uint64_t{});
    case DataType::kHalf:
      return fn(Half{});
    case DataType::kFloat:
      return fn(float{});
    case DataType::kDouble:
      return fn(double{});
    case DataType::kBfloat16:
      return fn(Bf16{});
  }
  return fn(float{});
}

// A few bits of a multiplicative hash of the index: not periodic, so an output that lands at
// the wrong offset (a chunk shifted by a multiple of a small period) does not match by chance.
// (splitmix64's finaliser over the index and the rank.)
uint32_t Mix(size_t i, int r, unsigned bits) {
  uint64_t x = uint64_t(i) * 0x9E3779B97F4A7C15ull + uint64_t(r) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return uint32_t(x >> (64 - bits));
}

// Rank r's value at index i. Small integers: exact in every type, sums included.
double Value(Collective c, ReduceOp op, int r, int /*ranks*/, size_t i) {
  if (!Reduces(c)) return double(Mix(i, r, 6));  // 0..63
  const uint32_t h = Mix(i, 0, 8);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return double((h + uint32_t(r)) % 4);
    case ReduceOp::kProd:
      return (h + uint32_t(r)) % 4 == 0 ? 2 : 1;
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      return double((h * 3 + uint32_t(r) * 5) % 7);
  }
  return 0;
}

// The reduction over every rank of Value(·, i), in T's arithmetic.
template <typename T>
T Reduced(Collective c, ReduceOp op, int ranks, size_t i) {
  double acc = Value(c, op, 0, ranks, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = Value(c, op, r, ranks, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
    }
  }
  T sum = Make<T>(acc);
  if (op != ReduceOp::kAvg) return sum;
  if constexpr (std::is_integral_v<T>) {
    return T(sum / T(ranks));
  } else {
    return Make<T>(Load(sum) / ranks);
  }
}

template <typename T>
bool Same(const T& got, const T& want) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    const double g = Load(got), w = Load(want);
    // An average is rounded once in the type; everything else is exact.
    const double tolerance = std::is_same_v<T, double>  ? 1e-12
                             : std::is_same_v<T, float> ? 1e-6
                                                        : 1e-2;
    return std::fabs(g - w) <= tolerance * std::max(1.0, std::fabs(w));
  }
}

// The value rank `rank` should hold at output index `i`.
template <typename T>
T Expected(Collective c, ReduceOp op, int rank, int ranks, int root, size_t count, size_t i) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      return Reduced<T>(c, op, ranks, i);
    case Collective::kReduceScatter:
      return Reduced<T>(c, op, ranks, size_t(rank) * count + i);
    case Collective::kAllGather:
      return Make<T>(Value(c, op, int(i / count), ranks, i % count));
    case Collective::kBroadcast:
      return Make<T>(Value(c, op, root, ranks, i));
    case Collective::kAllToAll:
      return Make<T>(Value(c, op, int(i / count), ranks, size_t(rank) * count + i % count));
    case Collective::kSendRecv:
      return Make<T>(Value(c, op, (rank + ranks - 1) % ranks, ranks, i));
  }
  return T{};
}

size_t OutputElements(Collective c, int ranks, size_t count) {
  return c == Collective::kAllGather || c == Collective::kAllToAll ? count * size_t(ranks) : count;
}

}  // namespace

void FillInput(Collective collective, DataType type, ReduceOp op, int rank, int ranks, void* buffer,
               size_t elements) {
  Dispatch(type, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(buffer);
    // Every rank its own values, broadcast's non-roots included: in place, a broadcast that
    // does not arrive leaves them, and the check sees it.
    for (size_t i = 0; i < elements; ++i) out[i] = Make<T>(Value(collective, op, rank, ranks, i));
    return 0;
  });
}

uint64_t CountWrong(Collective collective, DataType type, ReduceOp op, int rank, int ranks,
                    int root, const void* output, size_t count) {
  if (collective == Collective::kReduce && rank != root) return 0;
  return Dispatch(type, [&](auto zero) {
    using T = decltype(zero);
    const T* got = static_cast<const T*>(output);
    uint64_t wrong = 0;
    const size_t n = OutputElements(collective, ranks, count);
    for (size_t i = 0; i < n; ++i) {
      if (!Same(got[i], Expected<T>(collective, op, rank, ranks, root, count, i))) ++wrong;
    }
    return wrong;
  });
}

void CorruptFirstChecked(Collective collective, DataType type, int rank, int root, void* output,
                         size_t count) {
  if (count == 0 || (collective == Collective::kReduce && rank != root)) return;
  Dispatch(type, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(output);
    out[0] = Make<T>(Load(out[0]) + 1);
    return 0;
  });
}

void DivideBy(DataType type, void* buffer, size_t elements, int ranks) {
  Dispatch(type, [&](auto zero) {
    using T = decltype(zero);
    T* v = static_cast<T*>(buffer);
    if constexpr (std::is_integral_v<T>) {
      for (size_t i = 0; i < elements; ++i) v[i] = T(v[i] / T(ranks));
    } else if constexpr (std::is_floating_point_v<T>) {
      for (size_t i = 0; i < elements; ++i) v[i] = v[i] / T(ranks);
    } else {
      for (size_t i = 0; i < elements; ++i) v[i] = Make<T>(Load(v[i]) / ranks);
    }
    return 0;
  });
}

void ReduceInto(DataType type, ReduceOp op, void* inout, const void* in, size_t elements) {
  Dispatch(type, [&](auto zero) {
    using T = decltype(zero);
    T* acc = static_cast<T*>(inout);
    const T* x = static_cast<const T*>(in);
    for (size_t i = 0; i < elements; ++i) {
      const double a = Load(acc[i]), b = Load(x[i]);
      double r = a;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          r = a + b;
          break;
        case ReduceOp::kProd:
          r = a * b;
          break;
        case ReduceOp::kMax:
          r = std::max(a, b);
          break;
        case ReduceOp::kMin:
          r = std::min(a, b);
          break;
      }
      acc[i] = Make<T>(r);
    }
    return 0;
  });
}

}  // namespace pillar::bench
