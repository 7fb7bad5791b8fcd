// Typed access to the benchmark's buffers: the element values each rank starts with, what a
// correct collective leaves in each rank's output, and the comparison. Values are small
// integers, exact in every type (half and bfloat16 included), so a correct result is known in
// advance and a wrong element is a wrong element, not rounding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/collective.h"

namespace pillar::bench {

// Writes rank `rank`'s input for `collective` into `buffer` (`elements` of them).
void FillInput(Collective collective, DataType type, ReduceOp op, int rank, int ranks, void* buffer,
               size_t elements);
// Counts the elements of `output` (as CollectiveCall places it; `count` as there) that differ
// from a correct result on `rank`. Ranks whose output is undefined (reduce's non-roots) have 0.
uint64_t CountWrong(Collective collective, DataType type, ReduceOp op, int rank, int ranks,
                    int root, const void* output, size_t count);
// The element a check reads first on `rank`, plus one: what --inject-fault does.
void CorruptFirstChecked(Collective collective, DataType type, int rank, int root, void* output,
                         size_t count);
// Divides `elements` values by `ranks` in the type's own arithmetic: an average from a sum.
void DivideBy(DataType type, void* buffer, size_t elements, int ranks);
// Elements (T = float, double, integers) combined into `inout`: for backends that reduce
// half or bfloat16 in software.
void ReduceInto(DataType type, ReduceOp op, void* inout, const void* in, size_t elements);

// IEEE half and bfloat16, round to nearest even.
uint16_t HalfFromFloat(float f);
float FloatFromHalf(uint16_t h);
uint16_t Bfloat16FromFloat(float f);
float FloatFromBfloat16(uint16_t b);

}  // namespace pillar::bench
