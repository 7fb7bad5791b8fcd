#!/usr/bin/env bash
# The project's entry point on a fresh Debian 12 machine, where not even make is installed yet:
# installs what is needed from Debian's packages, then runs the Makefile target.
#   ./dev.sh run     build and start the demo server
#   ./dev.sh test    build and run the whole test suite (what CI runs)
#   ./dev.sh bench   build and run the side-by-side benchmarks
#   ./dev.sh gateway build and start the demo models behind a gateway over two replicas
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  run | test | gateway) scripts/install_deps.sh ;;
  bench) scripts/install_deps.sh --bench ;;
  *) echo "usage: ./dev.sh run|test|bench|gateway" >&2; exit 2 ;;
esac
exec make "$1"
