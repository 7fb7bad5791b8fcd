#!/usr/bin/env bash
# pillar's side-by-side benchmarks, in one run on this machine (see docs/benchmarks.md):
#   1. inference: pillar vs FastAPI+uvicorn serving the same TorchScript model, 1 and 64 connections;
#      uvicorn[standard] (httptools, uvloop, 2 workers) and plain uvicorn (h11, asyncio, 1 worker)
#   2. HTTP layer: pillar's cheapest authenticated route (GET /v2) vs nginx `return 200`
#   3. server-side overhead: pillar's per-request time outside model compute, from its metrics
# Each pair runs BENCH_ROUNDS times, alternating servers; the report takes medians.
# Usage: bench/run_all.sh [PILLAR_BINARY]     (make bench)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-10}
rounds=${BENCH_ROUNDS:-3}
work=$(mktemp -d /tmp/pillar-bench-XXXXXX)
out="$work/raw"
mkdir -p "$out"
source "$root/bench/common.sh"
sign_demo_store "$pillar" "$root" "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f "$work/nginx/nginx.pid" ]] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT

wait_http() {  # url, [header]
  for _ in $(seq 1 300); do
    if curl -s -o /dev/null -w '%{http_code}' ${2:+-H "$2"} "$1" | grep -qE '^(200|401|405)$'; then return 0; fi
    sleep 0.1
  done
  echo "bench: $1 did not come up" >&2; return 1
}

# pillar as `./dev.sh run` configures it (scripts/run_demo.sh): the signed demo store, the
# built-in policy, the access log and the audit log (with signed checkpoints) on, 2 event-loop
# threads (one per core).
demo_config "$pillar" "$work" "$work/store" "$work/signing.pub"
key=$("$pillar" key create -c "$work/pillar.toml" --name bench --role admin 2>/dev/null)
"$pillar" serve -c "$work/pillar.toml" --ports-file "$work/ports" 2>"$work/pillar.log" &
pids+=($!)
declare -A server_pid=([pillar]=$!)
for _ in $(seq 1 300); do [[ -f "$work/ports" ]] && break; sleep 0.1; done
pillar_port=$(sed -n 's/^data=//p' "$work/ports")
admin_port=$(sed -n 's/^admin=//p' "$work/ports")
wait_http "http://127.0.0.1:$pillar_port/v2/health/ready"

# The same pillar with [audit] backend = "off" (same store, keys and access log settings), for
# the audit-on/audit-off pair: what auditing every request costs.
# Only the [audit] table goes: the tables after it ([guard]) stay, so that the pair differs in
# auditing alone.
awk '/^\[/ { skip = ($0 == "[audit]") } !skip' "$work/pillar.toml" |
  sed -e "s#$work/access.log#$work/access-noaudit.log#" > "$work/pillar-noaudit.toml"
printf '[audit]\nbackend = "off"\n' >> "$work/pillar-noaudit.toml"
"$pillar" serve -c "$work/pillar-noaudit.toml" --ports-file "$work/ports-noaudit" \
  2>"$work/pillar-noaudit.log" &
pids+=($!)
server_pid[noaudit]=$!
for _ in $(seq 1 300); do [[ -f "$work/ports-noaudit" ]] && break; sleep 0.1; done
noaudit_port=$(sed -n 's/^data=//p' "$work/ports-noaudit")
wait_http "http://127.0.0.1:$noaudit_port/v2/health/ready"

# FastAPI + uvicorn with two worker processes (one per core), the same model file.
fastapi_port=$(free_port)
# OPENBLAS_NUM_THREADS=1 gives the peers the same fix pillar applies to itself: torch's thread
# setting does not reach OpenBLAS, whose idle pool otherwise spins on the shared cores.
export OPENBLAS_NUM_THREADS=1
(cd "$root/bench" && exec /usr/bin/python3 fastapi_server.py "$root/models/demo/store/digits/1/model.pt" \
  "$key" "$fastapi_port" 2 2>"$work/fastapi.log") &
pids+=($!)
server_pid[fastapi]=$!
wait_http "http://127.0.0.1:$fastapi_port/v2/models/digits/infer"
plain_port=$(free_port)
(cd "$root/bench" && exec /usr/bin/python3 fastapi_server.py "$root/models/demo/store/digits/1/model.pt" \
  "$key" "$plain_port" 1 plain 2>"$work/fastapi-plain.log") &
pids+=($!)
server_pid[plain]=$!
wait_http "http://127.0.0.1:$plain_port/v2/models/digits/infer"

# nginx `return 200`.
nginx_port=$(free_port)
mkdir -p "$work/nginx"
sed -e "s#@DIR@#$work/nginx#g" -e "s#@PORT@#$nginx_port#g" "$root/bench/nginx.conf.in" > "$work/nginx/nginx.conf"
nginx -c "$work/nginx/nginx.conf"
wait_http "http://127.0.0.1:$nginx_port/"
server_pid[nginx]=$(cat "$work/nginx/nginx.pid")

# A real held-out digit as the request body.
digit_body "$root" "$work/body.json"
export BENCH_KEY="$key" BENCH_BODY_FILE="$work/body.json"

# CPU time (user + system, clock ticks) of a server: its process and every process under it
# (uvicorn's and nginx's workers), from /proc.
server_ticks() {
  /usr/bin/python3 - "$1" <<'PY'
import os, sys
parent, ticks = {}, {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    parent[int(pid)], ticks[int(pid)] = int(fields[1]), int(fields[11]) + int(fields[12])
tree, grew = {int(sys.argv[1])}, True
while grew:
    grew = False
    for pid, up in parent.items():
        if up in tree and pid not in tree:
            tree.add(pid)
            grew = True
print(sum(ticks.get(pid, 0) for pid in tree))
PY
}

run_wrk() {  # name threads connections url script
  local name=$1 threads=$2 conns=$3 url=$4 script=$5
  local server=${server_pid[${name%%_*}]} before
  # What earlier runs left to write (the access logs' pages, which the kernel writes back about
  # 30 s later) is written now, outside the measured window: otherwise it lands on whichever run
  # comes then (the audit-on GET run, which always followed the audit-off inference run's
  # 230 MB of access log by about that much).
  sync
  before=$(server_ticks "$server")
  wrk -t"$threads" -c"$conns" -d"${seconds}s" --latency -s "$root/bench/$script" "$url" > "$out/$name.txt" 2>&1
  # The server's CPU time over the run, for CPU per request: what the shared cores' noise
  # changes least (requests/s move with what else the host runs; a request's CPU far less).
  echo "$(( $(server_ticks "$server") - before )) $(getconf CLK_TCK)" > "$out/$name.cpu"
}
# The audit-on/audit-off pairs run in turn, the first of a pair swapped every other round.
run_pair() {  # round name threads connections script on_url off_url
  local r=$1 name=$2 threads=$3 conns=$4 script=$5 on=$6 off=$7
  if (( r % 2 == 1 )); then
    run_wrk "pillar_${name}_r$r" "$threads" "$conns" "$on" "$script"
    run_wrk "noaudit_${name}_r$r" "$threads" "$conns" "$off" "$script"
  else
    run_wrk "noaudit_${name}_r$r" "$threads" "$conns" "$off" "$script"
    run_wrk "pillar_${name}_r$r" "$threads" "$conns" "$on" "$script"
  fi
}
metrics() { curl -s -H "Authorization: Bearer $key" "http://127.0.0.1:$admin_port/metrics" > "$out/$1.prom"; }

echo "bench: warming up" >&2
BENCH_PATH=/v2/models/digits/infer wrk -t2 -c16 -d3s -s "$root/bench/post_infer.lua" "http://127.0.0.1:$pillar_port" >/dev/null
BENCH_PATH=/v2/models/digits/infer wrk -t2 -c16 -d3s -s "$root/bench/post_infer.lua" "http://127.0.0.1:$fastapi_port" >/dev/null

for r in $(seq 1 "$rounds"); do
  echo "bench: round $r of $rounds" >&2
  export BENCH_PATH=/v2/models/digits/infer
  metrics "pillar_c1_r${r}_before"
  run_wrk "pillar_infer_c1_r$r" 1 1 "http://127.0.0.1:$pillar_port" post_infer.lua
  metrics "pillar_c1_r${r}_after"
  run_wrk "fastapi_infer_c1_r$r" 1 1 "http://127.0.0.1:$fastapi_port" post_infer.lua
  run_pair "$r" infer_c64 2 64 post_infer.lua "http://127.0.0.1:$pillar_port" \
    "http://127.0.0.1:$noaudit_port"
  run_wrk "fastapi_infer_c64_r$r" 2 64 "http://127.0.0.1:$fastapi_port" post_infer.lua
  run_wrk "plain_infer_c1_r$r" 1 1 "http://127.0.0.1:$plain_port" post_infer.lua
  run_wrk "plain_infer_c64_r$r" 2 64 "http://127.0.0.1:$plain_port" post_infer.lua
  BENCH_PATH=/v2 run_pair "$r" http_c64 2 64 get_auth.lua "http://127.0.0.1:$pillar_port" \
    "http://127.0.0.1:$noaudit_port"
  BENCH_PATH=/ BENCH_KEY="" run_wrk "nginx_http_c64_r$r" 2 64 "http://127.0.0.1:$nginx_port" get_auth.lua
done

commit=$(bench_commit "$root")
{
  echo "Commit $commit; pillar configured as ./dev.sh run does: signed store, built-in policy,"
  echo "access log and audit log (signed checkpoints) on; the audit-off pair is the same with"
  echo "[audit] backend = \"off\"; $rounds rounds of ${seconds} s."
  echo
  /usr/bin/python3 "$root/bench/report.py" "$out" "$rounds"
} | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/latest.md"
echo "bench: raw outputs in $out" >&2
