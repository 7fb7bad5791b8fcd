#!/usr/bin/env bash
# Side-by-side benchmarks of the security chain (docs/benchmarks.md, "Security chain"):
#   1. micro: authenticate (10,000 keys) + authorize (1,000 rules) + admit (3 limits), and JWT
#      verification beside PyJWT on the same tokens;
#   2. end to end with wrk: the same pillar binary with the chain off (built-in policy, no
#      limits) and on (a 1,000-rule ABAC policy and three limits), and on with the limits in a
#      real redis-server; throughput at 64 connections, latency at 1.
# Rounds alternate the three servers; the report takes medians.
# Usage: bench/run_security.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
pillar="$build/src/pillar"
seconds=${BENCH_SECONDS:-10}
rounds=${BENCH_ROUNDS:-3}
work=$(mktemp -d /tmp/pillar-security-bench-XXXXXX)
out="$work/raw"
mkdir -p "$out"
source "$root/bench/common.sh"
sign_demo_store "$pillar" "$root" "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  prune_work "$work"
}
trap cleanup EXIT

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --loglevel warning > "$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "bench: micro benchmarks" >&2
PILLAR_JWT_DIR="$work" PILLAR_REDIS_PORT="$redis_port" "$build/bench/security_benchmark" \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json \
  > "$out/micro.json"
/usr/bin/python3 "$root/bench/pyjwt_peer.py" "$work" > "$out/pyjwt.txt"
# Redis's own round trip on this machine, for scale: PING from one client.
redis-benchmark -p "$redis_port" -n 20000 -c 1 -t ping --csv > "$out/redis_ping.csv" 2>/dev/null
# And the limit script's own round trip (the three limits of the policy below, as pillar sends
# them): the floor of what a limited request can add, and what issue 16 measures the added p50
# against.
script=$(awk '/kAdmitScript = R"lua\(/{f=1;next} /\)lua";/{if(f){exit}} f' "$root/src/limits/redis_scripts.cc")
sha=$(redis-cli -p "$redis_port" --raw SCRIPT LOAD "$script")
period_end=$(( $(date +%s) / 86400 * 86400 + 86400 ))
# One admission (a batch of one): one spec of three charges, the lease TTL, spec 1 and its lease.
redis-benchmark -p "$redis_port" -n 20000 -c 1 --csv EVALSHA "$sha" 3 b:r:key b:q:tenant b:c:model \
  1 3 r 1 1.000000 1000000 0 q 1 1000000000000 "$period_end" 0 c 1 100000 0 0 60000000 1 lease \
  > "$out/redis_script.csv" 2>/dev/null
redis-cli -p "$redis_port" flushall >/dev/null

# The 1,000-rule policy: the bench key holds role7, role8, bench (and user, for the built-in
# policy of the chain-off server); 5 rules per role name
# the other roles' models, and the last rule grants bench on the demo tenant's models.
{
  echo "version = 1"
  for i in $(seq 0 999); do
    printf '[[rule]]\nname = "rule %d"\nroles = ["role%d"]\nactions = ["infer", "read_metadata"]\nresources = ["model:m%d/*"]\nwhen = ["principal.tenant == model.tenant"]\n' \
      "$i" $((i % 200)) $((i % 50))
  done
  bench_limits_toml
} > "$work/policy.toml"

start_pillar() {  # name, extra toml
  local name=$1 extra=$2
  mkdir -p "$work/$name"
  plain_config "$work/$name" "$work/store" "$work/signing.pub" "$work/state.db" "$extra"
  "$pillar" serve -c "$work/$name/pillar.toml" --ports-file "$work/$name/ports" \
    >/dev/null 2>"$work/$name/log" &
  pids+=($!)
  for _ in $(seq 1 300); do [[ -f "$work/$name/ports" ]] && break; sleep 0.1; done
  printf -v "${name}_port" '%s' "$(sed -n 's/^data=//p' "$work/$name/ports")"
}

# Key changes are audited in the log the configuration names (a bare --state is refused).
printf '[state]\npath = "%s"\n[audit]\nfile = "%s"\n' "$work/state.db" "$work/cli-audit.log" \
  > "$work/cli.toml"
key=$("$pillar" key create -c "$work/cli.toml" --name bench --tenant demo \
      --role role7 --role role8 --role bench --role user 2>/dev/null)
start_pillar off ""
start_pillar on "[policy]
file = \"$work/policy.toml\""
start_pillar shared "[policy]
file = \"$work/policy.toml\"
[limiter]
backend = \"redis\"
redis_port = $redis_port"

digit_body "$root" "$work/body.json"
export BENCH_KEY="$key" BENCH_BODY_FILE="$work/body.json" BENCH_PATH=/v2/models/digits/infer
for port in "$off_port" "$on_port" "$shared_port"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" \
         --data @"$work/body.json" "http://127.0.0.1:$port/v2/models/digits/infer")
  [[ "$code" == 200 ]] || { echo "bench: pillar on port $port answered $code" >&2; exit 1; }
  wrk -t2 -c16 -d2s -s "$root/bench/post_infer.lua" "http://127.0.0.1:$port" > /dev/null
done

for r in $(seq 1 "$rounds"); do
  echo "bench: round $r of $rounds" >&2
  for name in off on shared; do
    case $name in off) port=$off_port ;; on) port=$on_port ;; shared) port=$shared_port ;; esac
    wrk -t2 -c64 -d"${seconds}s" --latency -s "$root/bench/post_infer.lua" \
      "http://127.0.0.1:$port" > "$out/${name}_c64_r$r.txt" 2>&1
    wrk -t1 -c1 -d"${seconds}s" --latency -s "$root/bench/post_infer.lua" \
      "http://127.0.0.1:$port" > "$out/${name}_c1_r$r.txt" 2>&1
  done
done

/usr/bin/python3 "$root/bench/security_report.py" "$out" "$rounds" | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/security-latest.md"
echo "bench: raw outputs in $out" >&2
