// The memory-bandwidth check of `pillar health` beside memcpy, in one run
// (bench/run_collective.sh): the STREAM-style triad (24 bytes moved per element) and memcpy
// (2 bytes moved per byte copied) over the same working set, the same threads; best of 5 each;
// prints "triad_GBps memcpy_GBps".
//
//   memory_bandwidth_benchmark MIB THREADS
#include <cstdio>
#include <cstdlib>

#include "health/bandwidth.h"

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 768;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const double triad = pillar::health::TriadBandwidth(mib << 20, threads);
  const double copy = pillar::health::MemcpyBandwidth(mib << 20, threads);
  std::printf("%.3f %.3f\n", triad, copy);
  return triad > 0 && copy > 0 ? 0 : 1;
}
