#!/usr/bin/env bash
# The whole test suite: unit and integration tests (CTest) and the fuzzers for a bounded time.
# Usage: run_tests.sh [BUILD_DIR]   (make test builds BUILD_DIR first)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
fuzz_build="$root/build-fuzz"

cmake -S "$root/tests/fuzz" -B "$fuzz_build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$fuzz_build"
cmake -S "$root" -B "$build" -DPILLAR_FUZZ_BUILD_DIR="$fuzz_build" \
      -DPILLAR_FUZZ_SECONDS="${PILLAR_FUZZ_SECONDS:-30}" >/dev/null
cmake --build "$build"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 600
