#!/usr/bin/env bash
# What one request costs pillar, in counts that do not depend on how busy the machine is
# (docs/benchmarks.md, "Per-request cost"): instructions and allocations (callgrind, every thread
# of the process, during the load only) and system calls (perf stat on the kernel's syscall
# tracepoints, every thread), for GET /v2 with a key and for an inference of the digits model,
# pillar configured as ./dev.sh run configures it. Not strace: it slows the process, and pillar
# chooses between running a request on its loop and handing it to a model thread by measured
# times, so a slowed process would take the other path. The count starts half a second before
# the load and stops after it, so the idle threads' few calls of that time are included.
# Load: one connection (wrk -t1 -c1), so that a request's work is not shared with others (an
# inference runs alone, as a lone request does at low load).
# Usage: bench/run_costs.sh [PILLAR_BINARY]     (writes bench/results/costs-latest.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-10}
work=$(mktemp -d /tmp/pillar-costs-XXXXXX)
out="$work/raw"
mkdir -p "$out"
source "$root/bench/common.sh"
for tool in valgrind callgrind_control callgrind_annotate perf wrk; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is needed" >&2; exit 1; }
done
sign_demo_store "$pillar" "$root" "$work"
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT

demo_config "$pillar" "$work" "$work/store" "$work/signing.pub"
key=$("$pillar" key create -c "$work/pillar.toml" --name bench --role admin 2>/dev/null)
digit_body "$root" "$work/body.json"
export BENCH_KEY="$key" BENCH_BODY_FILE="$work/body.json"

try_start() {  # [wrapper...]: starts pillar, sets $server and $port; fails if it did not start
  rm -f "$work/ports"
  "$@" "$pillar" serve -c "$work/pillar.toml" --ports-file "$work/ports" 2>>"$work/pillar.log" &
  server=$!
  for _ in $(seq 1 600); do
    [[ -s "$work/ports" ]] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -s "$work/ports" ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
    return 1
  fi
  port=$(sed -n 's/^data=//p' "$work/ports")
}
start() { try_start "$@" || { echo "bench: pillar did not start" >&2; exit 1; }; }
stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }
load() {  # name path script seconds
  BENCH_PATH=$2 wrk -t1 -c1 -d"$4s" -s "$root/bench/$3" "http://127.0.0.1:$port" > "$out/$1.wrk"
  awk '/requests in/{print $1}' "$out/$1.wrk"
}

routes=("get /v2 get_auth.lua" "infer /v2/models/digits/infer post_infer.lua")

# Instructions and allocations: callgrind instruments only while the load runs. Valgrind 3.19
# cannot run LibTorch on every CPU (libhwy, which it loads, runs rdtscp as it loads: SIGILL on a
# CPU with AVX-512); there the inference is not counted, and GET /v2 is counted with the
# TorchScript module left out (the demo's digits then does not load).
# tcmalloc preloaded here, as `pillar serve` preloads it itself (app/serve_allocator.h): under
# valgrind its own re-execution would leave valgrind behind.
callgrind=(env LD_PRELOAD=libtcmalloc_minimal.so.4
           valgrind --tool=callgrind --instr-atstart=no --dump-instr=no --separate-threads=yes
           --callgrind-out-file="$work/callgrind.%p")
cg_routes=("${routes[@]}")
if ! try_start "${callgrind[@]}"; then
  echo "bench: valgrind cannot run pillar with LibTorch on this CPU: GET /v2 is counted without" \
       "the TorchScript module, the inference is not" >&2
  cg_routes=("${routes[0]}")
  PILLAR_TORCH_MODULE=/nonexistent start "${callgrind[@]}"
fi
for route in "${cg_routes[@]}"; do
  set -- $route
  load "warm_$1" "$2" "$3" 3 >/dev/null  # the model's first batches, caches, pools
  callgrind_control -i on "$server" >/dev/null
  n=$(load "cg_$1" "$2" "$3" "$seconds")
  callgrind_control -i off "$server" >/dev/null
  callgrind_control -d "$1" "$server" >/dev/null
  mkdir -p "$out/cg_$1"
  mv "$work"/callgrind.*.*-* "$out/cg_$1/"  # this dump: one file per thread
  echo "$n" > "$out/cg_$1.requests"
done
stop

# System calls: the kernel counts them, for every thread, during the load.
events=raw_syscalls:sys_enter
for name in read write readv writev recvfrom recvmsg sendto sendmsg epoll_wait epoll_ctl futex \
            newfstat newfstatat flock pread64 pwrite64 fdatasync fsync timerfd_settime \
            clock_nanosleep accept4 openat close; do
  events+=",syscalls:sys_enter_$name"
done
start
for route in "${routes[@]}"; do
  set -- $route
  load "warm_$1" "$2" "$3" 2 >/dev/null
  perf stat -e "$events" -x, -o "$out/syscalls_$1.csv" -p "$server" &
  counter=$!
  sleep 0.5
  n=$(load "sc_$1" "$2" "$3" "$seconds")
  kill -INT "$counter"; wait "$counter" 2>/dev/null || true
  echo "$n" > "$out/sc_$1.requests"
done
stop

commit=$(bench_commit "$root")
{
  echo "Commit $commit; pillar configured as ./dev.sh run does (signed store, built-in policy,"
  echo "access log and audit log on); one connection, ${seconds} s per route."
  echo
  /usr/bin/python3 "$root/bench/costs_report.py" "$out"
} | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/costs-latest.md"
