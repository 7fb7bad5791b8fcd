#!/usr/bin/env bash
# Where pillar's CPU goes under load, as the kernel samples it (perf record, cpu-clock, call
# graphs): pillar configured as ./dev.sh run configures it, GET /v2 with a key at 64 connections
# (wrk -t1 -c64) for BENCH_SECONDS, after 3 s of warm-up; ROUTE=infer posts a held-out digit to
# /v2/models/digits/infer instead. Prints the requests/s and the top
# symbols; keeps perf.data in the work directory with BENCH_KEEP=1. With PERF=0 it only measures
# the requests/s, for comparing two binaries in alternating rounds:
#   for i in 1 2; do PERF=0 bench/run_profile.sh old/pillar; PERF=0 bench/run_profile.sh build/src/pillar; done
# Usage: bench/run_profile.sh [PILLAR_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-12}
work=$(mktemp -d /tmp/pillar-profile-XXXXXX)
source "$root/bench/common.sh"
for tool in perf wrk; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is needed" >&2; exit 1; }
done
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  [[ -n "${BENCH_KEEP:-}" ]] || prune_work "$work"
}
trap cleanup EXIT
sign_demo_store "$pillar" "$root" "$work" >/dev/null 2>&1
demo_config "$pillar" "$work" "$work/store" "$work/signing.pub"
key=$("$pillar" key create -c "$work/pillar.toml" --name bench --role admin 2>/dev/null)
"$pillar" serve -c "$work/pillar.toml" --ports-file "$work/ports" 2>>"$work/pillar.log" &
server=$!
for _ in $(seq 1 600); do [[ -s "$work/ports" ]] && break; sleep 0.1; done
port=$(sed -n 's/^data=//p' "$work/ports")
export BENCH_KEY="$key"
if [[ "${ROUTE:-get}" == infer ]]; then
  digit_body "$root" "$work/body.json"
  export BENCH_PATH=/v2/models/digits/infer BENCH_BODY_FILE="$work/body.json"
  script="$root/bench/post_infer.lua"
else
  export BENCH_PATH=/v2
  script="$root/bench/get_auth.lua"
fi
wrk -t1 -c64 -d3s -s "$script" "http://127.0.0.1:$port" >/dev/null
wrk -t1 -c64 -d"${seconds}s" -s "$script" "http://127.0.0.1:$port" > "$work/wrk.txt" &
load=$!
if [[ "${PERF:-1}" != 0 ]]; then
  sleep 1
  perf record -e cpu-clock -F 2000 -g -p "$server" -o "$work/perf.data" -- sleep $((seconds - 3)) \
    2>/dev/null
fi
wait "$load"
echo "$(basename "$(dirname "$pillar")")/$(basename "$pillar"): $(awk '/Requests\/sec/{print $2}' "$work/wrk.txt") requests/s"
if grep -q "Non-2xx" "$work/wrk.txt"; then
  echo "bench: WARNING: $(grep "Non-2xx" "$work/wrk.txt" | tr -s ' ') (see $work/pillar.log)" >&2
fi
if [[ "${PERF:-1}" != 0 ]]; then
  perf report -i "$work/perf.data" --no-children --sort sym 2>/dev/null | grep -E '^ +[0-9.]+%' | head -25
fi
