#!/usr/bin/env bash
# A/B of two pillar binaries with their limits in one Redis (the security benchmark's third
# server: a key rate, a tenant's daily quota, a model's concurrency), rounds alternating; per
# round: requests/s at 64 connections (or CONNS) (wrk, POST /v2/models/digits/infer), CPU microseconds per
# request of pillar and of redis-server (from /proc), and Redis commands per request.
#
#   S=8 R=3 bench/ab_redis_limiter.sh BEFORE/pillar AFTER/pillar
#   BEFORE_BACKEND=embedded ...   # the first binary with the embedded limiter, for the gap
#   CONNS=8 ...                   # wrk's connections (64 unless set)
#   DELAY=0.0002 ...              # pillar reaches Redis through bench/delay_relay.py (a far Redis)
#
# Each binary needs its libpillar_torch.so beside it (copy build/src/ of each commit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd); before=$1; after=$2; seconds=${S:-8}; rounds=${R:-3}
work=$(mktemp -d); source $root/bench/common.sh
sign_demo_store "$after" "$root" "$work"
pids=(); trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null || true; done; sleep 0.5; rm -rf $work' EXIT
redis_port=$(free_port)
redis-server --port $redis_port --bind 127.0.0.1 --save "" --appendonly no --dir $work --loglevel warning >/dev/null 2>&1 &
pids+=($!); rpid=$!
for _ in $(seq 100); do redis-cli -p $redis_port ping >/dev/null 2>&1 && break; sleep 0.1; done
pillar_redis_port=$redis_port
if [[ -n "${DELAY:-}" ]]; then
  pillar_redis_port=$(free_port)
  python3 $root/bench/delay_relay.py $pillar_redis_port $redis_port $DELAY &
  pids+=($!); sleep 0.5
fi
{ echo "version = 1"; bench_limits_toml; } > $work/policy.toml
printf '[state]\npath = "%s"\n[audit]\nfile = "%s"\n' $work/state.db $work/cli-audit.log > $work/cli.toml
key=$($after key create -c $work/cli.toml --name bench --tenant demo --role bench 2>/dev/null)
declare -A port pid
for name in before after; do
  bin=$before; backend=redis
  [[ $name == after ]] && bin=$after || backend=${BEFORE_BACKEND:-redis}
  mkdir -p $work/$name
  plain_config $work/$name $work/store $work/signing.pub $work/state.db "[policy]
file = \"$work/policy.toml\"
[limiter]
backend = \"$backend\"
redis_port = $pillar_redis_port"
  $bin serve -c $work/$name/pillar.toml --ports-file $work/$name/ports >/dev/null 2>$work/$name/log &
  pid[$name]=$!; pids+=($!)
  for _ in $(seq 300); do [[ -s $work/$name/ports ]] && break; sleep 0.1; done
  port[$name]=$(sed -n 's/^data=//p' $work/$name/ports)
done
digit_body $root $work/body.json
export BENCH_KEY=$key BENCH_BODY_FILE=$work/body.json BENCH_PATH=/v2/models/digits/infer
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
calls() { redis-cli -p $redis_port info commandstats | awk -F'[=,:]' '/^cmdstat/{n+=$3} END{print n}'; }
redis-cli -p $redis_port config resetstat >/dev/null
for r in $(seq $rounds); do
  for name in before after; do
    p0=$(ticks ${pid[$name]}); r0=$(ticks $rpid); c0=$(calls)
    wrk -t2 -c${CONNS:-64} -d${seconds}s -s $root/bench/post_infer.lua http://127.0.0.1:${port[$name]} > $work/$name.$r.txt 2>&1
    p1=$(ticks ${pid[$name]}); r1=$(ticks $rpid); c1=$(calls)
    n=$(awk '/requests in/{print $1}' $work/$name.$r.txt)
    echo "round $r $name $(awk '/Requests\/sec/{print $2}' $work/$name.$r.txt) req/s; pillar $(awk -v d=$((p1-p0)) -v n=$n 'BEGIN{printf "%.1f", d*1e4/n}') us CPU/req; redis $(awk -v d=$((r1-r0)) -v n=$n 'BEGIN{printf "%.1f", d*1e4/n}') us CPU/req; $(awk -v d=$((c1-c0)) -v n=$n 'BEGIN{printf "%.2f", d/n}') redis commands/req; non-2xx $(awk '/Non-2xx/{print $NF}' $work/$name.$r.txt | grep . || echo 0)"
  done
done
redis-cli -p $redis_port info commandstats
