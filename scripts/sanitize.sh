#!/usr/bin/env bash
# The unit and integration tests under AddressSanitizer and UndefinedBehaviorSanitizer: the
# whole program (the `pillar` the integration tests start included) built with both, any
# report fatal. Slower than `make test` (a separate full build), so not part of it; run it
# before landing changes to threads, lifetimes or parsing.
# GCC 12 mistakes std::regex internals for uninitialized reads when the sanitizers are on, hence
# -Wno-maybe-uninitialized here only.
# Usage: scripts/sanitize.sh [BUILD_DIR]      (default build-asan)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-asan}
cmake -S "$root" -B "$build" -G Ninja -DPILLAR_BUILD_BENCHMARKS=OFF -DPILLAR_TCMALLOC=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Wno-maybe-uninitialized" \
  >/dev/null
cmake --build "$build"
# LibTorch's own allocations are not ours to audit: leak checking stays off.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" -L "unit|integration" --output-on-failure -j2
