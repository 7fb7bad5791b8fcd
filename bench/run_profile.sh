#!/usr/bin/env bash
# Where pillar's CPU goes under load, as the kernel samples it (perf record, cpu-clock, call
# graphs): pillar configured as ./dev.sh run configures it, GET /v2 with a key at CONNS
# connections (64 unless set; wrk -t1) for BENCH_SECONDS, after 3 s of warm-up; ROUTE=infer
# posts a held-out digit to /v2/models/digits/infer instead; AUDIT=off runs it with [audit]
# backend = "off". Prints the requests/s, pillar's CPU time per request by thread (user +
# system, from /proc over the run: a steadier measure of what a change costs than requests/s on
# a shared machine), with ROUTE=infer the mean rows a batch, and the top symbols; keeps
# perf.data in the work directory with BENCH_KEEP=1. PERF=dwarf records whole call stacks for
# 3 s instead and prints where the loops' time goes by part of the request path
# (bench/loop_breakdown.py). With PERF=0 it does not sample, for comparing two binaries in
# alternating rounds:
#   for i in 1 2; do PERF=0 bench/run_profile.sh old/pillar; PERF=0 bench/run_profile.sh build/src/pillar; done
# Usage: bench/run_profile.sh [PILLAR_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-12}
conns=${CONNS:-64}
work=$(mktemp -d /tmp/pillar-profile-XXXXXX)
source "$root/bench/common.sh"
for tool in perf wrk; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is needed" >&2; exit 1; }
done
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT
sign_demo_store "$pillar" "$root" "$work" >/dev/null 2>&1
demo_config "$pillar" "$work" "$work/store" "$work/signing.pub"
if [[ "${AUDIT:-on}" == off ]]; then
  sed -i 's/^\[audit\]$/[audit]\nbackend = "off"/' "$work/pillar.toml"
fi
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
# CPU ticks (user + system) of each of the server's threads, summed by thread name.
thread_ticks() {
  for task in /proc/"$server"/task/*; do
    echo "$(cat "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
  done | awk '{t[$1] += $2} END {for (k in t) print k, t[k]}' | sort
}
wrk -t1 -c"$conns" -d3s -s "$script" "http://127.0.0.1:$port" >/dev/null
thread_ticks > "$work/ticks.before"
wrk -t1 -c"$conns" -d"${seconds}s" -s "$script" "http://127.0.0.1:$port" > "$work/wrk.txt" &
load=$!
if [[ "${PERF:-1}" != 0 ]]; then
  sleep 1
  if [[ "${PERF:-1}" == dwarf ]]; then  # whole call stacks: fewer samples, each larger
    perf record -e cpu-clock -F 1000 --call-graph dwarf,16384 -p "$server" -o "$work/perf.data" \
      -- sleep 3 2>/dev/null
  else
    perf record -e cpu-clock -F 2000 -g -p "$server" -o "$work/perf.data" -- sleep $((seconds - 3)) \
      2>/dev/null
  fi
fi
wait "$load"
thread_ticks > "$work/ticks.after"
echo "$(basename "$(dirname "$pillar")")/$(basename "$pillar"): $(awk '/Requests\/sec/{print $2}' "$work/wrk.txt") requests/s"
requests=$(awk '/requests in/{print $1}' "$work/wrk.txt")
join "$work/ticks.before" "$work/ticks.after" | awk -v n="$requests" -v hz="$(getconf CLK_TCK)" '
  { us = ($3 - $2) / hz * 1e6 / n; total += us; if (us >= 0.01) printf "  %-14s %6.2f us of CPU a request\n", $1, us }
  END { printf "  %-14s %6.2f us of CPU a request\n", "all threads", total }'
if [[ "${ROUTE:-get}" == infer ]]; then  # rows a batch, warm-up included
  admin=$(sed -n 's/^admin=//p' "$work/ports")
  curl -s -H "Authorization: Bearer $key" "http://127.0.0.1:$admin/metrics" | awk '
    /^pillar_batch_size_sum\{model="digits"/ { s = $2 } /^pillar_batch_size_count\{model="digits"/ { c = $2 }
    END { if (c > 0) printf "  %-14s %6.2f rows a batch of digits\n", "batches", s / c }'
fi
if grep -q "Non-2xx" "$work/wrk.txt"; then
  echo "bench: WARNING: $(grep "Non-2xx" "$work/wrk.txt" | tr -s ' ') (see $work/pillar.log)" >&2
fi
if [[ "${PERF:-1}" == dwarf ]]; then
  perf script -i "$work/perf.data" -F comm,ip,sym 2>/dev/null | python3 "$root/bench/loop_breakdown.py"
elif [[ "${PERF:-1}" != 0 ]]; then
  perf report -i "$work/perf.data" --no-children --sort sym 2>/dev/null | grep -E '^ +[0-9.]+%' | head -25
fi
