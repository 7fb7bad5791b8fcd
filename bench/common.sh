# Shared by the benchmark scripts (sourced, not run).

# A free TCP port on loopback.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# pillar serves only signed versions: copy the demo store to WORK/store and sign it with a key
# of this run (WORK/signing.pub is the one to trust).  Usage: sign_demo_store PILLAR ROOT WORK
sign_demo_store() {
  local pillar=$1 root=$2 work=$3
  cp -r "$root/models/demo/store" "$work/store"
  "$pillar" keygen --out "$work/signing" >/dev/null
  for version in "$work"/store/*/*/; do
    "$pillar" model sign "$version" --key "$work/signing.key" 2>/dev/null
  done
}

# Removes what a benchmark run left in its work directory ($1) but its raw outputs ($1/raw):
# the servers' audit and access logs of a run take gigabytes, and /tmp filled up after a few.
# BENCH_KEEP=1 keeps everything (perf.data, callgrind files, the servers' logs).
prune_work() {
  [[ -z "${BENCH_KEEP:-}" ]] || return 0
  find "$1" -mindepth 1 -maxdepth 1 ! -name raw -exec rm -rf {} + 2>/dev/null || true
}

# The configuration `./dev.sh run` writes (scripts/run_demo.sh): two event loops, the built-in
# policy, the access log, the audit log with signed checkpoints (its key made here) and the
# content guard, every
# file in DIR.  Usage: demo_config PILLAR DIR STORE TRUSTED_PUB   (writes DIR/pillar.toml)
demo_config() {
  local pillar=$1 dir=$2 store=$3 trusted=$4
  "$pillar" keygen --out "$dir/audit" >/dev/null 2>&1
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
path = "$dir/state.db"
[logging]
access_log = "$dir/access.log"
[audit]
file = "$dir/audit.log"
signing_key = "$dir/audit.key"
public_keys = ["$dir/audit.pub"]
[guard]
TOML
}

# A real held-out digit (the first row of models/demo/heldout.csv) as an Open Inference Protocol
# request body.  Usage: digit_body ROOT FILE
digit_body() {
  local row
  row=$(sed -n 2p "$1/models/demo/heldout.csv")
  printf '{"inputs":[{"name":"pixels","shape":[1,64],"datatype":"FP32","data":[%s]}]}' \
    "${row#*,}" > "$2"
}

# The commit a run measured, marked when the tree differs from it.  Usage: bench_commit ROOT
bench_commit() {
  local commit
  commit=$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$1" diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
  echo "$commit"
}

# The security benchmark's rule for the bench role (infer on its tenant's models) and its three
# limits (a key's rate, a tenant's daily quota, a model's concurrency), none of which refuses at
# the benchmark's rates: every request pays for all three.  Usage: bench_limits_toml >> POLICY
bench_limits_toml() {
  cat <<'TOML'
[[rule]]
name = "bench infers on its tenant's models"
roles = ["bench"]
actions = ["infer", "read_metadata"]
resources = ["model:*"]
when = ["principal.tenant == model.tenant"]

[[limit]]
name = "key-rate"
per = "key"
rate = 1000000
burst = 1000000

[[limit]]
name = "tenant-daily"
per = "tenant"
quota = 1000000000000
period = "day"

[[limit]]
name = "model-slots"
per = "model"
concurrency = 100000
TOML
}

# A pillar.toml of two event loops serving the demo store, with an access log and no audit log
# or guard, EXTRA appended (a policy, a limiter).
# Usage: plain_config DIR STORE TRUSTED_PUB STATE_DB EXTRA   (writes DIR/pillar.toml)
plain_config() {
  cat > "$1/pillar.toml" <<TOML
[server]
threads = 2
[data]
port = 0
[admin]
port = 0
[repository]
path = "$2"
trusted_keys = ["$3"]
[state]
path = "$4"
[logging]
access_log = "$1/access.log"
$5
TOML
}
