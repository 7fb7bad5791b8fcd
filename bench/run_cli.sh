#!/usr/bin/env bash
# Command start-up beside the floor of a small native CLI (docs/benchmarks.md, "Command
# start-up"): `pillar --version`, `pillar key list` on a state with a few keys and
# `pillar audit verify` on a small log, each against `sqlite3 :memory: .quit`, in ROUNDS rounds
# (default 3) of RUNS runs each (default 30); the table gives the median of the rounds' medians
# and the range of the ratio. None of these commands loads a model, so none may pay for LibTorch.
# Usage: bench/run_cli.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
pillar="$build/src/pillar"
rounds=${ROUNDS:-3}
runs=${RUNS:-30}
work=$(mktemp -d /tmp/pillar-cli-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$pillar" keygen --out "$work/audit" >/dev/null 2>&1
cat > "$work/pillar.toml" <<TOML
[state]
path = "$work/state.db"

[audit]
file = "$work/audit.log"
signing_key = "$work/audit.key"
public_keys = ["$work/audit.pub"]
TOML
for i in 1 2 3 4 5; do
  "$pillar" key create -c "$work/pillar.toml" --name "bench $i" --role user >/dev/null 2>&1
done
for round in $(seq "$rounds"); do
  hyperfine -N --warmup 3 --runs "$runs" --export-json "$work/round-$round.json" \
    -n "sqlite3 :memory: .quit" "sqlite3 :memory: .quit" \
    -n "pillar --version" "$pillar --version" \
    -n "pillar key list" "$pillar key list -c $work/pillar.toml" \
    -n "pillar audit verify" "$pillar audit verify -c $work/pillar.toml" >&2
done
echo "commit $(git -C "$root" rev-parse --short HEAD)" >&2
/usr/bin/python3 - "$work" "$rounds" <<'PY' | tee "$root/bench/results/cli-latest.md"
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
per_round = []
for r in range(1, rounds + 1):
    per_round.append({x["command"]: x["median"] for x in json.load(open(f"{work}/round-{r}.json"))["results"]})
floor = "sqlite3 :memory: .quit"
print("| command | median | sqlite3 :memory: .quit | ratio (pillar / floor) | range of the ratio |")
print("| --- | ---: | ---: | ---: | --- |")
for command in ["pillar --version", "pillar key list", "pillar audit verify"]:
    ratios = [rd[command] / rd[floor] for rd in per_round]
    t = statistics.median(rd[command] for rd in per_round)
    f = statistics.median(rd[floor] for rd in per_round)
    print(f"| `{command}` | {t * 1000:.1f} ms | {f * 1000:.1f} ms | {statistics.median(ratios):.2f}x "
          f"| {min(ratios):.2f}-{max(ratios):.2f}x |")
PY
