// Bandwidth measurements for the health checks: memory (a STREAM-style triad on every core)
// and a disk's sequential, fsynced writes.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace pillar::health {

// STREAM's triad a[i] = b[i] + s * c[i] over three arrays of doubles that together hold `bytes`,
// split over `threads` threads (each first-touches its own part); the best of `repeats`
// passes, counting 24 bytes per element as STREAM does. GB/s, 1e9 bytes.
double TriadBandwidth(size_t bytes, int threads, int repeats = 5);

// memcpy between two buffers of bytes/2 each, the same threads and repeats, counting the bytes
// read and written (2 per byte copied): the peer the triad is compared with.
double MemcpyBandwidth(size_t bytes, int threads, int repeats = 5);

// Writes `bytes` to a new file in `dir` in 1 MiB blocks, fsyncs, removes it: MB/s (1e6 bytes).
[[nodiscard]] absl::StatusOr<double> SequentialWriteBandwidth(const std::string& dir, size_t bytes);

}  // namespace pillar::health
