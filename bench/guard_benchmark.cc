// The guard's recognizers over a file, in process and on one core: MB/s of guard::Recognize
// (every entity type on, the default threshold). bench/run_guard.sh runs it beside
// guard_re_peer.py, Python's `re` with the same entity types. Prints "<MB/s> <findings>".
// Usage: guard_benchmark FILE [ROUNDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "guard/recognizer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: guard_benchmark FILE [ROUNDS]\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  double best = 1e30;
  size_t findings = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    findings = pillar::guard::Recognize(text, {}).size();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  std::printf("%.1f %zu\n", double(text.size()) / 1e6 / best, findings);
  return 0;
}
