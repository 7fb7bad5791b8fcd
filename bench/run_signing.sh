#!/usr/bin/env bash
# Model verification speed beside sha256sum (docs/benchmarks.md, "Model signatures"): a model
# version of one large weight file (random bytes, SIZE_MIB, default 512) and its model.toml,
# signed; `pillar model verify` (signature, statement, every file's SHA-256) against
# `sha256sum` over the same files. Both read from the page cache after a warm-up run.
# Usage: bench/run_signing.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
pillar="$build/src/pillar"
size=${SIZE_MIB:-512}
work=$(mktemp -d /tmp/pillar-signing-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/m/1"
head -c $((size * 1024 * 1024)) /dev/urandom > "$work/m/1/model.pt"
echo 'platform = "torchscript"' > "$work/m/1/model.toml"
"$pillar" keygen --out "$work/key" >/dev/null 2>&1
"$pillar" model sign "$work/m/1" --key "$work/key.key" 2>/dev/null
hyperfine --warmup 2 --runs 10 --export-json "$work/result.json" \
  -n "pillar model verify" "$pillar model verify $work/m/1 --trusted-key $work/key.pub" \
  -n "sha256sum" "sha256sum $work/m/1/model.pt $work/m/1/model.toml" >&2
/usr/bin/python3 - "$work/result.json" "$size" <<'PY' | tee "$root/bench/results/signing-latest.md"
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
size = int(sys.argv[2])
pillar, peer = results["pillar model verify"]["median"], results["sha256sum"]["median"]
print(f"| files | pillar model verify | sha256sum | ratio (peer / pillar) |")
print(f"| --- | ---: | ---: | ---: |")
print(f"| {size} MiB weights + model.toml | {pillar * 1000:.0f} ms ({size / pillar:.0f} MiB/s) "
      f"| {peer * 1000:.0f} ms ({size / peer:.0f} MiB/s) | {peer / pillar:.2f}x |")
PY
