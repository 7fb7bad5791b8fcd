#!/usr/bin/env bash
# The demo's two digit models behind a pillar gateway (./dev.sh gateway): two replicas serve the
# committed demo store (digits and digits-lite, signed with the demo's key), and a gateway in
# front of them serves both models as platform = "remote" over the replicas, with digits falling
# back to digits-lite. Everything lives under .pillar/gateway; the replicas stop with the gateway.
# Ports: the gateway's PILLAR_PORT (8000) and PILLAR_ADMIN_PORT (8001); the replicas' data ports
# are the next free ones the kernel gives (written to their ports files).
set -euo pipefail
pillar=$(realpath "${1:-build/src/pillar}")
root=$(cd "$(dirname "$0")/.." && pwd)
demo="$root/.pillar/gateway"
port=${PILLAR_PORT:-8000}
admin_port=${PILLAR_ADMIN_PORT:-8001}
mkdir -p "$demo"
chmod 700 "$root/.pillar" "$demo"
[[ -f "$demo/signing.key" ]] || "$pillar" keygen --out "$demo/signing" >/dev/null 2>&1

# config DIR STORE DATA_PORT ADMIN_PORT [STATE]: a pillar.toml like the demo's.
config() {
  mkdir -p "$1"
  [[ -f "$1/audit.key" ]] || "$pillar" keygen --out "$1/audit" >/dev/null 2>&1
  cat > "$1/pillar.toml" <<TOML
# Written by scripts/run_gateway_demo.sh; see docs/configuration.md and docs/resilience.md.
[data]
address = "127.0.0.1"
port = $3
[admin]
address = "127.0.0.1"
port = $4
[repository]
path = "$2"
trusted_keys = ["$demo/signing.pub"]
[state]
path = "${5:-$1/state.db}"
[logging]
access_log = "$1/access.log"
[audit]
file = "$1/audit.log"
signing_key = "$1/audit.key"
public_keys = ["$1/audit.pub"]
TOML
}

# The replicas: one signed copy of the demo store, one state database (one key works on both).
rm -rf "$demo/replica-store"
cp -r "$root/models/demo/store" "$demo/replica-store"
for version in "$demo"/replica-store/*/*/; do
  "$pillar" model sign "$version" --key "$demo/signing.key" 2>/dev/null
done
pids=()
stop_replicas() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_replicas EXIT
replica_urls=()
for name in a b; do
  config "$demo/replica-$name" "$demo/replica-store" 0 0 "$demo/replicas.db"
  rm -f "$demo/replica-$name/ports"
  "$pillar" serve -c "$demo/replica-$name/pillar.toml" --ports-file "$demo/replica-$name/ports" \
    2>"$demo/replica-$name/log" &
  pids+=($!)
done
token=$("$pillar" key create -c "$demo/replica-a/pillar.toml" --name "gateway" --tenant demo \
        --role user --expires-in 30d 2>/dev/null)
printf '%s\n' "$token" > "$demo/upstream.token"
chmod 600 "$demo/upstream.token"
for name in a b; do
  for _ in $(seq 1 600); do [[ -s "$demo/replica-$name/ports" ]] && break; sleep 0.1; done
  replica_urls+=("http://127.0.0.1:$(sed -n 's/^data=//p' "$demo/replica-$name/ports")")
done

# The gateway's store: both models, remote over the replicas (zone a first), same signatures.
rm -rf "$demo/store"
for model in digits digits-lite; do
  mkdir -p "$demo/store/$model/1"
  toml="$root/models/demo/store/$model/1/model.toml"
  {
    [[ $model == digits ]] && echo 'fallback = ["digits-lite"]'
    echo 'platform = "remote"'
    # The demo's contract: max_batch_size, inputs, outputs and [access]; not [batching] or
    # [instance], which are the replicas' business.
    sed -e '/^platform/d' -e '/^\[batching\]/,/^$/d' -e '/^\[instance\]/,/^$/d' "$toml"
    cat <<TOML

[remote]
endpoints = [{ url = "${replica_urls[0]}", zone = "a" }, { url = "${replica_urls[1]}", zone = "b" }]
credentials_file = "$demo/upstream.token"
attempt_timeout_ms = 1000
[remote.health_check]
interval_ms = 2000
TOML
  } > "$demo/store/$model/1/model.toml"
  "$pillar" model sign "$demo/store/$model/1" --key "$demo/signing.key" 2>/dev/null
done
config "$demo/gateway" "$demo/store" "$port" "$admin_port"
printf '[server]\nzone = "a"\n' >> "$demo/gateway/pillar.toml"
key=$("$pillar" key create -c "$demo/gateway/pillar.toml" --name "demo user" --tenant demo \
      --role user --expires-in 30d 2>/dev/null)
admin_key=$("$pillar" key create -c "$demo/gateway/pillar.toml" --name "demo admin" --role admin \
      --expires-in 30d 2>/dev/null)

row=$(sed -n 2p "$root/models/demo/heldout.csv")
body="{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[${row#*,}]}]}"
cat <<MSG

  pillar gateway demo
  gateway      http://127.0.0.1:$port (data), http://127.0.0.1:$admin_port (admin), zone a
  replicas     ${replica_urls[0]} (zone a, pid ${pids[0]}), ${replica_urls[1]} (zone b, pid ${pids[1]})
  API key      $key   (tenant demo, role user)
  admin key    $admin_key

  curl -s -H 'Authorization: Bearer $key' http://127.0.0.1:$port/v2/models/digits/infer -d '$body'

  The live state of the backends (health, breakers, load, latency):
  PILLAR_API_KEY=$admin_key $pillar backends --admin http://127.0.0.1:$admin_port

  Stop replica a (kill -STOP ${pids[0]}): requests move to b; stop both and digits answers
  503 at once once its breaker opens (then kill -CONT them).

MSG
"$pillar" serve -c "$demo/gateway/pillar.toml"
