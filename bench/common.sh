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
prune_work() {
  find "$1" -mindepth 1 -maxdepth 1 ! -name raw -exec rm -rf {} + 2>/dev/null || true
}
