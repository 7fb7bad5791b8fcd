#!/usr/bin/env bash
# Resilience benchmarks (docs/benchmarks.md, "Resilience"), pillar's gateway against HAProxy
# (Debian) in front of the same pillar upstreams serving a simulated model (2 ms):
#   1. failure recovery: three upstreams under steady load (4 clients, closed loop); one is
#      SIGKILLed at 2 s, or SIGSTOPped at 2 s and continued at 5 s. Both gateways check
#      readiness every 250 ms (100 ms timeout, out after 2 failures, back after 1 pass), give an
#      attempt 150 ms, and retry on another server. Counted: failed requests and the error window
#      (first to last failure).
#   2. shedding: one upstream model of 50 ms behind two connections (capacity 40/s), offered
#      80/s with a 250 ms deadline: pillar sheds by estimated wait, HAProxy queues (maxconn 2,
#      timeout queue 250 ms). Counted: p99 of the admitted, how fast refusals come, and whether
#      a refused request that obeys Retry-After succeeds.
#   3. memory: the gateway's resident memory with 1 backend of 1 endpoint and with 100 backends
#      of 10 endpoints each (ten upstreams), after the same traffic; HAProxy with the same
#      backends as the peer.
# pillar runs as ./dev.sh run configures it (signed store, keys, policy, access and audit logs).
# Usage: bench/run_resilience.sh [PILLAR_BINARY]
#   BENCH_ROUNDS (3), BENCH_PARTS ("recovery shedding memory": the parts to run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
rounds=${BENCH_ROUNDS:-3}
parts=" ${BENCH_PARTS:-recovery shedding memory} "
work=$(mktemp -d /tmp/pillar-resilience-XXXXXX)
out="$work/raw"
mkdir -p "$out"
source "$root/bench/common.sh"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT
client="/usr/bin/python3 $root/bench/load_client.py"

tensors='max_batch_size = 8
[[input]]
name = "x"
datatype = "FP32"
shape = [4]
[[output]]
name = "y"
datatype = "FP32"
shape = [2]'
printf '%s' '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[0.25,0.5,0.75,1.0]}]}' \
  > "$work/body.json"

# The upstreams' store (one, read by all of them) and their shared state database.
mkdir -p "$work/up"
"$pillar" keygen --out "$work/up/signing" >/dev/null 2>&1
for spec in "sim 2 4" "slow 50 2"; do
  set -- $spec
  mkdir -p "$work/up/store/$1/1"
  printf '%s\n[instance]\ncount = %s\n[simulated]\nlatency_ms = %s\n' \
    "platform = \"simulated\"
$tensors" "$3" "$2" > "$work/up/store/$1/1/model.toml"
  "$pillar" model sign "$work/up/store/$1/1" --key "$work/up/signing.key" >/dev/null 2>&1
done

# instance DIR STORE TRUSTED [STATE]: DIR/pillar.toml as ./dev.sh run configures it.
instance() {
  local dir=$1 store=$2 trusted=$3 state=${4:-$1/state.db}
  mkdir -p "$dir"
  [[ -f "$dir/audit.key" ]] || "$pillar" keygen --out "$dir/audit" >/dev/null 2>&1
  cat > "$dir/pillar.toml" <<TOML
[server]
threads = 2
[data]
port = 0
[admin]
port = 0
[repository]
path = "$store"
trusted_keys = ["$trusted"]
[state]
path = "$state"
[logging]
access_log = "$dir/access.log"
[audit]
file = "$dir/audit.log"
signing_key = "$dir/audit.key"
public_keys = ["$dir/audit.pub"]
TOML
}

# start DIR: runs the pillar of DIR; sets $port and $pid.
start() {
  rm -f "$1/ports"
  "$pillar" serve -c "$1/pillar.toml" --ports-file "$1/ports" 2>>"$1/log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 300); do [[ -s "$1/ports" ]] && break; sleep 0.05; done
  port=$(sed -n 's/^data=//p' "$1/ports")
}

instance "$work/up/0" "$work/up/store" "$work/up/signing.pub" "$work/up/state.db"
up_key=$("$pillar" key create -c "$work/up/0/pillar.toml" --name gateway --role admin 2>/dev/null)
printf '%s\n' "$up_key" > "$work/upstream.token"
chmod 600 "$work/upstream.token"
for i in $(seq 1 9); do
  instance "$work/up/$i" "$work/up/store" "$work/up/signing.pub" "$work/up/state.db"
done

# upstreams N: starts upstreams 0..N-1; their ports in up_ports, pids in up_pids.
upstreams() {
  up_ports=(); up_pids=()
  for i in $(seq 0 $(($1 - 1))); do
    start "$work/up/$i"
    up_ports+=("$port"); up_pids+=("$pid")
  done
}
stop_upstreams() {
  for p in "${up_pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  for p in "${up_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# gateway NAME MODELS_TOML...: a signed gateway store of remote models named in pairs
# (model, [remote] body); sets gw_dir and gw_key.
gateway() {
  gw_dir="$work/$1"; shift
  rm -rf "$gw_dir"; mkdir -p "$gw_dir/store"
  "$pillar" keygen --out "$gw_dir/signing" >/dev/null 2>&1
  while (($#)); do
    mkdir -p "$gw_dir/store/$1/1"
    printf 'platform = "remote"\n%s\n[remote]\n%s\n' "$tensors" "$2" > "$gw_dir/store/$1/1/model.toml"
    "$pillar" model sign "$gw_dir/store/$1/1" --key "$gw_dir/signing.key" >/dev/null 2>&1
    shift 2
  done
  instance "$gw_dir" "$gw_dir/store" "$gw_dir/signing.pub"
  gw_key=$("$pillar" key create -c "$gw_dir/pillar.toml" --name bench --role admin 2>/dev/null)
}

endpoints() {  # PORT...: a TOML array of loopback URLs
  local list="" p
  for p in "$@"; do list+="${list:+, }\"http://127.0.0.1:$p\""; done
  echo "[$list]"
}

haproxy_start() {  # CONFIG
  haproxy -f "$1" -db 2>>"$work/haproxy.log" &
  pid=$!; pids+=("$pid")
  sleep 0.3
}

# --- 1. Failure recovery
recovery_round() {  # ROUND SCENARIO GATEWAY
  local r=$1 scenario=$2 gw=$3 url key gpid
  upstreams 3
  if [[ $gw == pillar ]]; then
    gateway gw_recovery sim "endpoints = $(endpoints "${up_ports[@]}")
credentials_file = \"$work/upstream.token\"
attempt_timeout_ms = 150
[remote.health_check]
interval_ms = 250
timeout_ms = 100
unhealthy_threshold = 2
healthy_threshold = 1"
    start "$gw_dir"; gpid=$pid
    url="http://127.0.0.1:$port/v2/models/sim/infer"; key=$gw_key
  else
    local hport; hport=$(free_port)
    {
      printf 'global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 150ms\n'
      printf '  timeout client 30s\n  timeout server 150ms\n  option http-keep-alive\n'
      printf '  http-reuse always\n  retries 3\n  option redispatch 1\n'
      printf '  retry-on all-retryable-errors\n'
      printf 'frontend f\n  bind 127.0.0.1:%s\n  default_backend b\nbackend b\n' "$hport"
      printf '  option httpchk GET /v2/health/ready\n  timeout check 100ms\n'
      for p in "${up_ports[@]}"; do
        printf '  server u%s 127.0.0.1:%s check inter 250ms fall 2 rise 1\n' "$p" "$p"
      done
    } > "$work/haproxy-recovery.cfg"
    haproxy_start "$work/haproxy-recovery.cfg"; gpid=$pid
    url="http://127.0.0.1:$hport/v2/models/sim/infer"; key=$up_key
  fi
  sleep 0.5
  local args=(--threads 4 --timeout-ms 2000 --pid "${up_pids[1]}" --at 2)
  if [[ $scenario == kill ]]; then args+=(--seconds 6 --signal SIGKILL)
  else args+=(--seconds 7 --signal SIGSTOP --resume-at 5); fi
  $client "$url" "$key" "$work/body.json" "${args[@]}" > "$out/recovery_${scenario}_${gw}_r$r.json"
  kill "$gpid" 2>/dev/null || true; wait "$gpid" 2>/dev/null || true
  stop_upstreams
}

# --- 2. Shedding at 2x capacity
shedding_round() {  # ROUND GATEWAY
  local r=$1 gw=$2 url key gpid
  upstreams 1
  if [[ $gw == pillar ]]; then
    gateway gw_shed slow "endpoints = $(endpoints "${up_ports[0]}")
credentials_file = \"$work/upstream.token\"
connections = 2
max_queue = 64"
    start "$gw_dir"; gpid=$pid
    url="http://127.0.0.1:$port/v2/models/slow/infer"; key=$gw_key
  else
    local hport; hport=$(free_port)
    {
      printf 'global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 2s\n'
      printf '  timeout client 30s\n  timeout server 30s\n  timeout queue 250ms\n'
      printf '  option http-keep-alive\n  http-reuse always\n'
      printf 'frontend f\n  bind 127.0.0.1:%s\n  default_backend b\nbackend b\n' "$hport"
      printf '  server u 127.0.0.1:%s maxconn 2\n' "${up_ports[0]}"
    } > "$work/haproxy-shed.cfg"
    haproxy_start "$work/haproxy-shed.cfg"; gpid=$pid
    url="http://127.0.0.1:$hport/v2/models/slow/infer"; key=$up_key
  fi
  # Warm up (pillar measures the call time it estimates from), then 80/s for 8 s.
  $client "$url" "$key" "$work/body.json" --threads 2 --seconds 1 > /dev/null
  $client "$url" "$key" "$work/body.json" --threads 16 --rate 5 --seconds 8 --deadline-ms 250 \
    --timeout-ms 250 --obey-retry-after > "$out/shed_${gw}_r$r.json"
  kill "$gpid" 2>/dev/null || true; wait "$gpid" 2>/dev/null || true
  stop_upstreams
}

# --- 3. Memory with 100 backends of 10 endpoints
memory_round() {  # ROUND GATEWAY
  local r=$1 gw=$2 models=() m url gpid
  upstreams 10
  cat > "$work/rotate.lua" <<'LUA'
local n = 0
local body = io.open(os.getenv("BODY_FILE")):read("*a")
local key = os.getenv("KEY")
local models = tonumber(os.getenv("MODELS"))
request = function()
  n = n + 1
  return wrk.format("POST", "/v2/models/m" .. (n % models) .. "/infer",
    {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}, body)
end
LUA
  for shape in "1 1" "100 10"; do
    set -- $shape
    local count=$1 width=$2
    if [[ $gw == pillar ]]; then
      models=()
      for m in $(seq 0 $((count - 1))); do
        models+=("m$m" "endpoints = $(endpoints "${up_ports[@]:0:$width}")
model = \"sim\"
credentials_file = \"$work/upstream.token\"")
      done
      gateway "gw_mem_$count" "${models[@]}"
      start "$gw_dir"; gpid=$pid; key=$gw_key
      url="http://127.0.0.1:$port"
    else
      local hport; hport=$(free_port)
      {
        printf 'global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 2s\n'
        printf '  timeout client 30s\n  timeout server 30s\n  option http-keep-alive\n'
        printf '  http-reuse always\nfrontend f\n  bind 127.0.0.1:%s\n' "$hport"
        printf '  use_backend %%[path,field(4,/)]\n'
        for m in $(seq 0 $((count - 1))); do
          # The backend is chosen by the model in the path; the upstream serves it as "sim".
          printf 'backend m%s\n  option httpchk GET /v2/health/ready\n' "$m"
          printf '  http-request set-path /v2/models/sim/infer\n'
          for p in "${up_ports[@]:0:$width}"; do
            printf '  server u%s 127.0.0.1:%s check inter 10s\n' "$p" "$p"
          done
        done
      } > "$work/haproxy-mem.cfg"
      haproxy_start "$work/haproxy-mem.cfg"; gpid=$pid; key=$up_key
      url="http://127.0.0.1:$hport"
    fi
    sleep 1
    BODY_FILE="$work/body.json" KEY=$key MODELS=$count \
      wrk -t2 -c64 -d5s -s "$work/rotate.lua" "$url" > "$out/mem_${gw}_${count}_r$r.wrk" 2>&1
    awk '/VmRSS/ {print $2}' "/proc/$gpid/status" > "$out/mem_${gw}_${count}_r$r.kb"
    kill "$gpid" 2>/dev/null || true; wait "$gpid" 2>/dev/null || true
  done
  stop_upstreams
}

for r in $(seq 1 "$rounds"); do
  echo "bench: round $r of $rounds" >&2
  for gw in pillar haproxy; do
    if [[ $parts == *" recovery "* ]]; then
      recovery_round "$r" kill "$gw"
      recovery_round "$r" stop "$gw"
    fi
    if [[ $parts == *" shedding "* ]]; then shedding_round "$r" "$gw"; fi
    if [[ $parts == *" memory "* ]]; then memory_round "$r" "$gw"; fi
  done
done

commit=$(bench_commit "$root")
{
  echo "Commit $commit; the pillar gateway as ./dev.sh run configures it (keys, policy, access"
  echo "and audit logs on); HAProxy $(haproxy -v | head -1 | awk '{print $3}'); $rounds alternating rounds."
  echo
  /usr/bin/python3 "$root/bench/resilience_report.py" "$out" "$rounds"
} | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/resilience-latest.md"
echo "bench: raw outputs in $out" >&2
