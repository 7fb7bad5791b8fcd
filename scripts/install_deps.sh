#!/usr/bin/env bash
# Installs pillar's build, test and benchmark dependencies from Debian 12 packages.
# Idempotent and quiet when everything is already there. Uses sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config clang clang-format libclang-rt-14-dev
  libboost-dev libssl-dev libabsl-dev libsqlite3-dev libsimdjson-dev
  libtomlplusplus-dev libcli11-dev libhiredis-dev redis-server libsodium-dev libre2-dev
  libgoogle-perftools-dev libpq-dev postgresql libxxhash-dev libopenmpi-dev openmpi-bin libgloo-dev
  libtorch-dev libopenblas0-pthread
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  python3 python3-torch python3-sklearn python3-numpy
  curl openssl
)
if [[ "${1:-}" == "--bench" ]]; then
  # uvicorn with httptools and uvloop is what `pip install uvicorn[standard]` gives a user.
  # PyJWT is the peer of the JWT verification benchmark; hyperfine times model verification;
  # HAProxy and nginx are the peers of the proxy benchmark (bench/run_proxy.sh), and socat, a
  # byte relay that parses nothing, its floor for the latency a hop adds; valgrind (callgrind)
  # and linux-perf (syscall tracepoints) count the per-request costs (bench/run_costs.sh).
  packages+=(wrk nginx-light python3-fastapi python3-uvicorn python3-httptools python3-uvloop
             python3-jwt hyperfine haproxy socat valgrind linux-perf)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "pillar: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
