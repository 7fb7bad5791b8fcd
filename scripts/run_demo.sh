#!/usr/bin/env bash
# Prepares the demo (config, state, API keys, a signing key and a signed copy of the committed
# demo model store) under .pillar/demo and starts `pillar serve` on it. Ports: PILLAR_PORT (8000) and PILLAR_ADMIN_PORT (8001).
set -euo pipefail
pillar=$(realpath "${1:-build/src/pillar}")
root=$(cd "$(dirname "$0")/.." && pwd)
demo="$root/.pillar/demo"
port=${PILLAR_PORT:-8000}
admin_port=${PILLAR_ADMIN_PORT:-8001}
mkdir -p "$demo"
chmod 700 "$root/.pillar" "$demo"

# The server serves only versions signed by a trusted key: the demo makes its own signing key
# once, and signs a fresh copy of the committed store with it (the repository stays unwritten).
[[ -f "$demo/demo-signing.key" ]] || "$pillar" keygen --out "$demo/demo-signing" >/dev/null
# The audit log's checkpoints are signed with a key of their own.
[[ -f "$demo/audit.key" ]] || "$pillar" keygen --out "$demo/audit" >/dev/null 2>&1
rm -rf "$demo/store"
cp -r "$root/models/demo/store" "$demo/store"
# And a simulated language model for the OpenAI-compatible routes (docs/protocol.md).
mkdir -p "$demo/store/assistant/1"
cat > "$demo/store/assistant/1/model.toml" <<TOML
platform = "simulated"
[access]
tenant = "demo"
[simulated]
api = "openai"
time_to_first_token_ms = 50
tokens_per_second = 40
completion_tokens = 24
TOML
for version in "$demo"/store/*/*/; do
  "$pillar" model sign "$version" --key "$demo/demo-signing.key" 2>/dev/null
done

cat > "$demo/pillar.toml" <<TOML
# Demo configuration written by scripts/run_demo.sh; see docs/configuration.md.
[data]
address = "127.0.0.1"
port = $port

[admin]
address = "127.0.0.1"
port = $admin_port

[repository]
path = "$demo/store"
trusted_keys = ["$demo/demo-signing.pub"]
# What pillar model push, promote and rollback sign with; the server never reads it.
signing_key = "$demo/demo-signing.key"

[state]
path = "$demo/state.db"

[logging]
access_log = "$demo/access.log"

[audit]
file = "$demo/audit.log"
signing_key = "$demo/audit.key"
public_keys = ["$demo/audit.pub"]

# Content safety for language models: personal data redacted, secrets blocked (docs/guard.md).
[guard]
TOML

stamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# A user of tenant "demo" (may infer on the demo models), and an admin (the admin plane too).
key=$("$pillar" key create -c "$demo/pillar.toml" --name "demo user $stamp" --tenant demo \
      --role user --expires-in 30d 2>/dev/null)
admin_key=$("$pillar" key create -c "$demo/pillar.toml" --name "demo admin $stamp" \
      --role admin --expires-in 30d 2>/dev/null)

# A real held-out digit: its label and its 64 pixel intensities.
row=$(sed -n 2p "$root/models/demo/heldout.csv")
label=${row%%,*}
pixels=${row#*,}
body="{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[$pixels]}]}"

cat <<MSG

  pillar demo
  data plane   http://127.0.0.1:$port   (Open Inference Protocol)
  admin plane  http://127.0.0.1:$admin_port   (/metrics, /admin/v1/models)
  API key      $key   (tenant demo, role user)
  admin key    $admin_key   (role admin)
               (each shown once; only their hashes are stored in $demo/state.db)

  Classify a held-out handwritten digit (its label is $label):

  curl -s -H 'Authorization: Bearer $key' \\
    http://127.0.0.1:$port/v2/models/digits/infer \\
    -d '$body'

  A simulated language model on the OpenAI-compatible routes, streamed, with an e-mail address
  the guard redacts before the model sees it:

  curl -sN -H 'Authorization: Bearer $key' http://127.0.0.1:$port/v1/chat/completions \\
    -d '{"model":"assistant","stream":true,"messages":[{"role":"user","content":"mail me at jo@example.org"}]}'

  Without the key the same call gets 401; the user key gets 403 on the admin plane:
  curl -s -H 'Authorization: Bearer $admin_key' http://127.0.0.1:$admin_port/admin/v1/models

  Every decision and change is in a hash-chained, signed audit log:
  $pillar audit tail -n 5 -c $demo/pillar.toml
  $pillar audit verify -c $demo/pillar.toml

  Stop with Ctrl-C (drains, then exits).

MSG
exec "$pillar" serve -c "$demo/pillar.toml"
