#!/usr/bin/env bash
# The proxy path (docs/benchmarks.md, "Proxy path"): the same pillar upstream, serving a
# simulated model (platform = "simulated", no latency, 2 instances), reached directly and through
# three gateways, each with kept-alive connections to it:
#   - pillar (platform = "remote"), configured as ./dev.sh run configures it: API keys, the
#     built-in policy, the access log and the signed audit log on;
#   - HAProxy 2.6 (Debian), mode http, http-reuse always, 2 threads, no logging (it has only
#     syslog);
#   - nginx (Debian), proxy_pass to an upstream block with keepalive, 2 workers, access log on.
# And, at one connection only, socat (Debian): a byte relay that parses nothing (a process per
# client connection, one upstream connection each), the floor of what a hop adds to latency on
# this machine: two more trips over loopback and the wake-ups they take.
# Neither peer authenticates, authorizes, limits or audits: they forward the client's key to the
# upstream, which checks it. Rounds alternate the gateways; the report gives medians and the
# range of each round's ratio.
# Usage: bench/run_proxy.sh [PILLAR_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-10}
rounds=${BENCH_ROUNDS:-3}
work=$(mktemp -d /tmp/pillar-proxy-XXXXXX)
out="$work/raw"
mkdir -p "$out"
source "$root/bench/common.sh"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f "$work/nginx/nginx.pid" ]] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT

wait_ports() {  # ports file
  for _ in $(seq 1 1200); do [[ -s "$1" ]] && return 0; sleep 0.1; done
  echo "bench: no $1" >&2; return 1
}

# serve NAME STORE_MODEL_TOML: a pillar in $work/NAME, as ./dev.sh run configures it, serving one
# signed model "sim" whose model.toml is STORE_MODEL_TOML; prints its admin key.
serve() {
  local name=$1 toml=$2 dir="$work/$1"
  mkdir -p "$dir/store/sim/1"
  printf '%s\n' "$toml" > "$dir/store/sim/1/model.toml"
  "$pillar" keygen --out "$dir/signing" >/dev/null 2>&1
  "$pillar" model sign "$dir/store/sim/1" --key "$dir/signing.key" >/dev/null 2>&1
  demo_config "$pillar" "$dir" "$dir/store" "$dir/signing.pub"
  "$pillar" key create -c "$dir/pillar.toml" --name bench --role admin 2>/dev/null
}

tensors='max_batch_size = 8
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]'

upstream_key=$(serve upstream "platform = \"simulated\"
$tensors
[instance]
count = 2
[simulated]
latency_ms = 0")
"$pillar" serve -c "$work/upstream/pillar.toml" --ports-file "$work/upstream/ports" 2>"$work/upstream.log" &
pids+=($!)
wait_ports "$work/upstream/ports"
upstream_port=$(sed -n 's/^data=//p' "$work/upstream/ports")

printf '%s\n' "$upstream_key" > "$work/upstream.token"
chmod 600 "$work/upstream.token"
gateway_key=$(serve gateway "platform = \"remote\"
$tensors
[remote]
endpoints = [\"http://127.0.0.1:$upstream_port\"]
credentials_file = \"$work/upstream.token\"
connections = 64")
# CALLGRIND=1 runs the pillar gateway and HAProxy under callgrind (instrumenting only while
# their load runs).
wrap=() wrap_haproxy=()
if [[ "${CALLGRIND:-0}" != 0 ]]; then
  wrap=(valgrind --tool=callgrind --instr-atstart=no --dump-instr=no
        --callgrind-out-file="$work/callgrind-pillar.out")
  wrap_haproxy=(valgrind --tool=callgrind --instr-atstart=no --dump-instr=no
                --callgrind-out-file="$work/callgrind-haproxy.out")
fi
"${wrap[@]}" "$pillar" serve -c "$work/gateway/pillar.toml" --ports-file "$work/gateway/ports" \
  2>"$work/gateway.log" &
pids+=($!)
wait_ports "$work/gateway/ports"
gateway_port=$(sed -n 's/^data=//p' "$work/gateway/ports")

haproxy_port=$(free_port)
cat > "$work/haproxy.cfg" <<CFG
global
  nbthread 2
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend gateway
  bind 127.0.0.1:$haproxy_port
  default_backend upstream
backend upstream
  server pillar 127.0.0.1:$upstream_port maxconn 64
CFG
"${wrap_haproxy[@]}" haproxy -f "$work/haproxy.cfg" -db 2>"$work/haproxy.log" &
pids+=($!)

nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log $work/nginx/access.log;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  keepalive_requests 1000000;
  upstream pillar { server 127.0.0.1:$upstream_port; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$nginx_port;
    location / {
      proxy_pass http://pillar;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf"

relay_port=$(free_port)
socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,fork,reuseaddr TCP:127.0.0.1:"$upstream_port" \
  2>"$work/socat.log" &
pids+=($!)

printf '%s' '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[0.25,0.5,0.75,1.0]}]}' > "$work/body.json"
export BENCH_BODY_FILE="$work/body.json" BENCH_PATH=/v2/models/sim/infer
run_wrk() {  # name threads connections port key
  BENCH_KEY=$5 wrk -t"$1" -c"$2" -d"${seconds}s" --latency -s "$root/bench/post_infer.lua" \
    "http://127.0.0.1:$3" > "$out/$4" 2>&1
}
for target in "upstream $upstream_port $upstream_key" "pillar $gateway_port $gateway_key" \
              "haproxy $haproxy_port $upstream_key" "nginx $nginx_port $upstream_key" \
              "relay $relay_port $upstream_key"; do
  set -- $target
  BENCH_KEY=$3 wrk -t2 -c16 -d2s -s "$root/bench/post_infer.lua" "http://127.0.0.1:$2" | grep -q "non_200 0" \
    || { echo "bench: $1 does not answer 200" >&2; exit 1; }
done

# CALLGRIND=1: instructions per proxied request of the pillar gateway and of HAProxy, every
# thread, at one connection (counts that do not depend on how busy the machine is), with the
# functions that execute most of them, then exit without the comparison rounds. Valgrind's CPU
# has no SHA extensions: OpenSSL's SHA-256 (the audit chain, the key's hash) runs its AVX2 code
# here, several times the instructions it takes on a CPU that has them.
if [[ "${CALLGRIND:-0}" != 0 ]]; then
  for target in "pillar ${pids[1]} $gateway_port $gateway_key" \
                "haproxy ${pids[2]} $haproxy_port $upstream_key"; do
    set -- $target
    callgrind_control -i on "$2" >/dev/null
    BENCH_KEY=$4 wrk -t1 -c1 -d"${seconds}s" -s "$root/bench/post_infer.lua" \
      "http://127.0.0.1:$3" > "$out/callgrind-$1.wrk"
    callgrind_control -i off "$2" >/dev/null
    callgrind_control -d proxy "$2" >/dev/null
    requests=$(awk '/requests in/{print $1}' "$out/callgrind-$1.wrk")
    dump=$(ls "$work"/callgrind-"$1".out.* | head -1)
    if [[ -n "${PROFILE_KEEP:-}" ]]; then cp "$dump" "$PROFILE_KEEP.$1"; fi
    echo "== $1"
    callgrind_annotate --inclusive=no "$dump" | awk -v n="$requests" '
      /PROGRAM TOTALS/ { gsub(",", "", $1); printf "%d requests, %.0f instructions a request\n", n, $1 / n; next }
      /^ *[0-9,]+ +\(/ && shown < '"${PROFILE_TOP:-25}"' {
        count = $1; gsub(",", "", count); $1 = ""; $2 = ""
        printf "%8.0f  %s\n", count / n, substr($0, 3); shown++ }' | cut -c1-160
  done
  exit 0
fi

# PROFILE=1: where the pillar gateway's CPU goes at 64 connections (perf, cpu-clock, call graphs)
# and its CPU time per request by thread, then exit without the comparison rounds.
if [[ "${PROFILE:-0}" != 0 ]]; then
  gateway_pid=${pids[1]}
  thread_ticks() {
    for task in /proc/"$gateway_pid"/task/*; do
      echo "$(cat "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
    done | awk '{t[$1] += $2} END {for (k in t) print k, t[k]}' | sort
  }
  thread_ticks > "$work/ticks.before"
  run_wrk 2 64 "$gateway_port" profile.txt "$gateway_key" &
  load=$!
  sleep 1
  if [[ "$PROFILE" == dwarf ]]; then  # whole call stacks: fewer samples, each larger
    perf record -e cpu-clock -F 1000 --call-graph dwarf,16384 -p "$gateway_pid" \
      -o "$work/perf.data" -- sleep 3 2>/dev/null
  else
    perf record -e cpu-clock -F 2000 -g -p "$gateway_pid" -o "$work/perf.data" \
      -- sleep $((seconds - 3)) 2>/dev/null
  fi
  wait "$load"
  thread_ticks > "$work/ticks.after"
  echo "gateway: $(awk '/Requests\/sec/{print $2}' "$out/profile.txt") requests/s"
  requests=$(awk '/requests in/{print $1}' "$out/profile.txt")
  join "$work/ticks.before" "$work/ticks.after" | awk -v n="$requests" -v hz="$(getconf CLK_TCK)" '
    { us = ($3 - $2) / hz * 1e6 / n; total += us; if (us >= 0.01) printf "  %-14s %6.2f us of CPU a request\n", $1, us }
    END { printf "  %-14s %6.2f us of CPU a request\n", "all threads", total }'
  if [[ -n "${PROFILE_KEEP:-}" ]]; then cp "$work/perf.data" "$PROFILE_KEEP"; fi
  perf report -i "$work/perf.data" --no-children --sort sym 2>/dev/null | grep -E '^ +[0-9.]+%' \
    | head -"${PROFILE_TOP:-40}" || true
  exit 0
fi

# CPU=1: the CPU time per request of each process (the gateway, the upstream, wrk) through
# each gateway at 64 connections, from /proc, then exit without the comparison rounds.
if [[ "${CPU:-0}" != 0 ]]; then
  ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  hz=$(getconf CLK_TCK)
  for target in "pillar $gateway_port $gateway_key ${pids[1]}" \
                "haproxy $haproxy_port $upstream_key ${pids[2]}" \
                "nginx $nginx_port $upstream_key $(cat "$work/nginx/nginx.pid")"; do
    set -- $target
    gw_pids=$(pgrep -P "$4"; echo "$4")
    gw_ticks() { local t=0; for p in $gw_pids; do t=$((t + $(ticks "$p"))); done; echo $t; }
    # Context switches of the gateway's threads (voluntary: it waited; not: it was preempted).
    gw_switches() {
      for p in $gw_pids; do cat /proc/"$p"/task/*/status; done |
        awk '/^voluntary_ctxt/{v += $2} /^nonvoluntary_ctxt/{n += $2} END {print v, n}'
    }
    read -r v0 nv0 < <(gw_switches)
    g0=$(gw_ticks); u0=$(ticks "${pids[0]}")
    BENCH_KEY=$3 wrk -t2 -c64 -d"${seconds}s" -s "$root/bench/post_infer.lua" \
      "http://127.0.0.1:$2" > "$out/cpu_$1.txt" 2>&1 &
    load=$!
    w0=$(sleep 0.2; ticks "$load" 2>/dev/null || echo 0)
    w1=$(while kill -0 "$load" 2>/dev/null; do ticks "$load" 2>/dev/null || true; sleep 0.5; done | tail -1)
    wait "$load"
    g1=$(gw_ticks); u1=$(ticks "${pids[0]}")
    read -r v1 nv1 < <(gw_switches)
    n=$(awk '/requests in/{print $1}' "$out/cpu_$1.txt")
    awk -v name="$1" -v n="$n" -v hz="$hz" -v g="$((g1 - g0))" -v u="$((u1 - u0))" -v w="$((w1 - w0))" \
      -v rps="$(awk '/Requests\/sec/{print $2}' "$out/cpu_$1.txt")" \
      -v v="$((v1 - v0))" -v nv="$((nv1 - nv0))" 'BEGIN {
        f = 1e6 / hz / n
        printf "%-8s %8.0f requests/s; us of CPU a request: gateway %5.1f, upstream %5.1f, wrk %5.1f;" \
          " gateway switches a request: %.3f waits, %.3f preempted\n",
          name, rps, g * f, u * f, w * f, v / n, nv / n }'
  done
  exit 0
fi

# SYSCALLS=1: the system calls each gateway, and the upstream behind it, make at 64
# connections (perf trace summaries while wrk runs), then exit without the comparison rounds.
# Tracing slows every process, so counts are given per request as the gateway's receives count
# requests: a gateway receives twice a request (the client's request, the upstream's reply) and
# the upstream once, when nothing is pipelined.
if [[ "${SYSCALLS:-0}" != 0 ]]; then
  for target in "pillar $gateway_port $gateway_key ${pids[1]}" \
                "haproxy $haproxy_port $upstream_key ${pids[2]}" \
                "nginx $nginx_port $upstream_key $(cat "$work/nginx/nginx.pid")"; do
    set -- $target
    gw_pids=$( (pgrep -P "$4"; echo "$4") | paste -sd, -)
    BENCH_KEY=$3 wrk -t2 -c64 -d"${seconds}s" -s "$root/bench/post_infer.lua" \
      "http://127.0.0.1:$2" > "$out/sys_$1.txt" 2>&1 &
    load=$!
    sleep 1
    perf trace -s -p "$gw_pids" -o "$work/trace_$1.txt" -- sleep $((seconds - 2)) 2>/dev/null &
    tracer=$!
    perf trace -s -p "${pids[0]}" -o "$work/trace_up_$1.txt" -- sleep $((seconds - 2)) \
      2>/dev/null || true
    wait "$tracer" || true
    wait "$load"
    for who in "gateway:trace_$1.txt:2" "upstream:trace_up_$1.txt:1"; do
      IFS=: read -r role file receives <<< "$who"
      awk -v name="$1" -v role="$role" -v k="$receives" '
        $2 ~ /^[0-9]+$/ && $1 ~ /^[a-z_0-9]+$/ {
          calls[$1] += $2; total += $2
          if ($1 ~ /^(recvfrom|recvmsg|read)$/) received += $2
        }
        END {
          n = received / k
          printf "%-8s %-8s %.2f system calls a request:", name, role, total / n
          for (c in calls) if (calls[c] / n >= 0.01) printf " %s %.2f", c, calls[c] / n
          printf "\n"
        }' "$work/$file"
    done
  done
  exit 0
fi

for r in $(seq 1 "$rounds"); do
  echo "bench: round $r of $rounds" >&2
  for target in "upstream $upstream_port $upstream_key" "pillar $gateway_port $gateway_key" \
                "haproxy $haproxy_port $upstream_key" "nginx $nginx_port $upstream_key"; do
    set -- $target
    run_wrk 1 1 "$2" "$1_c1_r$r.txt" "$3"
    run_wrk 2 64 "$2" "$1_c64_r$r.txt" "$3"
  done
  run_wrk 1 1 "$relay_port" "relay_c1_r$r.txt" "$upstream_key"
done

commit=$(bench_commit "$root")
{
  echo "Commit $commit; the pillar gateway as ./dev.sh run configures it (keys, policy, access"
  echo "and audit logs on); $rounds alternating rounds of ${seconds} s."
  echo
  /usr/bin/python3 "$root/bench/proxy_report.py" "$out" "$rounds"
} | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/proxy-latest.md"
echo "bench: raw outputs in $out" >&2
