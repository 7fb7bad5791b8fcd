#!/usr/bin/env bash
# Audit log throughput beside its peers (docs/benchmarks.md, "Audit log"):
#  - append: RECORDS events from THREADS producer threads, durable within FSYNC_MS (group
#    commit), pillar's AuditLog (hash chain, signed checkpoints, one file) against SQLite rows
#    (WAL, synchronous=FULL, one transaction per FSYNC_MS): records/second until all are durable;
#  - verify: `pillar audit verify`'s verifier over the log just written (every link, sequence
#    number, header and checkpoint signature) against one plain SHA-256 pass over the same bytes.
# RUNS rounds, medians. Usage: bench/run_audit.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
bench="$build/bench/audit_benchmark"
records=${RECORDS:-1000000}
threads=${THREADS:-4}
fsync_ms=${FSYNC_MS:-10}
runs=${RUNS:-5}
work=$(mktemp -d /tmp/pillar-audit-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$runs"); do
  mkdir -p "$work/p$i" "$work/s$i"
  # Alternate the order, so neither always runs on a warmer (or busier) machine.
  if (( i % 2 )); then
    echo "pillar $("$bench" pillar "$work/p$i" "$records" "$threads" "$fsync_ms")" >> "$work/append"
    echo "sqlite $("$bench" sqlite "$work/s$i" "$records" "$threads" "$fsync_ms")" >> "$work/append"
  else
    echo "sqlite $("$bench" sqlite "$work/s$i" "$records" "$threads" "$fsync_ms")" >> "$work/append"
    echo "pillar $("$bench" pillar "$work/p$i" "$records" "$threads" "$fsync_ms")" >> "$work/append"
  fi
  echo "$("$bench" verify "$work/p$i")" >> "$work/verify"
  rm -rf "$work/s$i"
  [[ $i -gt 1 ]] && rm -rf "$work/p$((i - 1))"
done
/usr/bin/python3 - "$work" "$records" "$threads" "$fsync_ms" "$runs" <<'PY' | tee "$root/bench/results/audit-latest.md"
import statistics, sys
work, records, threads, fsync_ms, runs = sys.argv[1:]
append = {"pillar": [], "sqlite": []}
for line in open(f"{work}/append"):
    name, rate = line.split()
    append[name].append(float(rate))
verify, floor = [], []
for line in open(f"{work}/verify"):
    v, h = line.split()
    verify.append(float(v)); floor.append(float(h))
p, s = statistics.median(append["pillar"]), statistics.median(append["sqlite"])
v, h = statistics.median(verify), statistics.median(floor)
print(f"{int(records):,} events, {threads} producer threads, durable within {fsync_ms} ms, "
      f"median of {runs} runs")
print()
print("| operation | pillar | peer | peer | ratio (pillar / peer) |")
print("| --- | ---: | --- | ---: | ---: |")
print(f"| append (group commit) | {p:,.0f} records/s | SQLite WAL, a transaction per {fsync_ms} ms "
      f"| {s:,.0f} records/s | {p / s:.2f}x |")
print(f"| verify (chain, signatures) | {v:,.0f} records/s | one SHA-256 pass over the bytes "
      f"| {h:,.0f} records/s | {v / h:.2f}x |")
PY
