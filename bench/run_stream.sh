#!/usr/bin/env bash
# The streaming relay (docs/benchmarks.md, "Streaming relay"): the same pillar upstream serving a
# simulated language model ([simulated] api = "openai": 64 tokens, the first after 20 ms, then
# 100 per second), streamed to 64 concurrent clients, reached directly and through two gateways:
#   - pillar (platform = "openai"), configured as ./dev.sh run configures it: API keys, the
#     built-in policy, the access log, the signed audit log and the content guard on (which
#     screens every streamed chunk with its hold-back window);
#   - nginx (Debian), proxy_pass with proxy_buffering off to an upstream block with keepalive,
#     2 workers, access log on.
# nginx does not authenticate, limit, screen or audit: it forwards the client's key to the
# upstream, which checks it. Measured (bench/stream_client.py): events (chunks) per second at 64
# streams, time to first event, and pillar's resident memory while it relays them against idle.
# Rounds alternate the targets; the report gives medians and ranges.
# Usage: bench/run_stream.sh [PILLAR_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pillar=$(realpath "${1:-$root/build/src/pillar}")
seconds=${BENCH_SECONDS:-10}
rounds=${BENCH_ROUNDS:-3}
streams=${BENCH_STREAMS:-64}
work=$(mktemp -d /tmp/pillar-stream-XXXXXX)
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

wait_ports() {
  for _ in $(seq 1 300); do [[ -s "$1" ]] && return 0; sleep 0.1; done
  echo "bench: no $1" >&2; return 1
}

# serve NAME MODEL_TOML: a pillar in $work/NAME as ./dev.sh run configures it, serving one signed
# model "chat"; prints an admin key.
serve() {
  local name=$1 toml=$2 dir="$work/$1"
  mkdir -p "$dir/store/chat/1"
  printf '%s\n' "$toml" > "$dir/store/chat/1/model.toml"
  "$pillar" keygen --out "$dir/signing" >/dev/null 2>&1
  "$pillar" model sign "$dir/store/chat/1" --key "$dir/signing.key" >/dev/null 2>&1
  demo_config "$pillar" "$dir" "$dir/store" "$dir/signing.pub"
  "$pillar" key create -c "$dir/pillar.toml" --name bench --role admin 2>/dev/null
}

upstream_key=$(serve upstream 'platform = "simulated"
[simulated]
api = "openai"
time_to_first_token_ms = 20
tokens_per_second = 100
completion_tokens = 64')
"$pillar" serve -c "$work/upstream/pillar.toml" --ports-file "$work/upstream/ports" 2>"$work/upstream.log" &
pids+=($!)
wait_ports "$work/upstream/ports"
upstream_port=$(sed -n 's/^data=//p' "$work/upstream/ports")
printf '%s\n' "$upstream_key" > "$work/upstream.token"
chmod 600 "$work/upstream.token"

gateway_key=$(serve gateway "platform = \"openai\"
[remote]
endpoints = [\"http://127.0.0.1:$upstream_port\"]
credentials_file = \"$work/upstream.token\"
connections = 128
timeout_ms = 60000")
"$pillar" serve -c "$work/gateway/pillar.toml" --ports-file "$work/gateway/ports" 2>"$work/gateway.log" &
gateway_pid=$!
pids+=($gateway_pid)
wait_ports "$work/gateway/ports"
gateway_port=$(sed -n 's/^data=//p' "$work/gateway/ports")

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
  upstream pillar { server 127.0.0.1:$upstream_port; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$nginx_port;
    location / {
      proxy_pass http://pillar;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 60s;
    }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf"

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status"; }
# Warm up each target (and check it answers).
for target in "upstream $upstream_port $upstream_key" "pillar $gateway_port $gateway_key" \
              "nginx $nginx_port $upstream_key"; do
  set -- $target
  /usr/bin/python3 "$root/bench/stream_client.py" "$2" "$3" 8 2 > "$out/warm_$1.json"
  grep -q '"failures": 0' "$out/warm_$1.json" || { echo "bench: $1 fails: $(cat "$out/warm_$1.json")" >&2; exit 1; }
done
sleep 1
echo "idle_rss_kb $(rss_kb "$gateway_pid")" > "$out/memory.txt"

for r in $(seq 1 "$rounds"); do
  echo "bench: round $r of $rounds" >&2
  for target in "upstream $upstream_port $upstream_key" "pillar $gateway_port $gateway_key" \
                "nginx $nginx_port $upstream_key"; do
    set -- $target
    if [[ $1 == pillar ]]; then  # the gateway's resident memory, sampled while it relays
      ( peak=0; end=$((SECONDS + ${seconds%.*})); while (( SECONDS < end )); do
          v=$(rss_kb "$gateway_pid"); (( v > peak )) && peak=$v; sleep 0.2; done
        echo "round${r}_peak_rss_kb $peak" >> "$out/memory.txt" ) &
      sampler=$!
    fi
    /usr/bin/python3 "$root/bench/stream_client.py" "$2" "$3" "$streams" "$seconds" > "$out/$1_r$r.json"
    # Only the sampler: a bare `wait` would wait for the servers too.
    [[ $1 == pillar ]] && wait "$sampler"
  done
done

commit=$(bench_commit "$root")
{
  echo "Commit $commit; the pillar gateway as ./dev.sh run configures it (keys, policy, access"
  echo "and audit logs, content guard on); $streams concurrent streams; $rounds alternating"
  echo "rounds of ${seconds} s."
  echo
  /usr/bin/python3 "$root/bench/stream_report.py" "$out" "$rounds"
} | tee "$work/report.md"
mkdir -p "$root/bench/results"
cp "$work/report.md" "$root/bench/results/stream-latest.md"
echo "bench: raw outputs in $out" >&2
