#!/usr/bin/env bash
# Checkpoint speed beside its peers (docs/benchmarks.md, "Checkpoints"), for SIZES GiB of
# float32 tensors (default "1 4"), ROUNDS rounds (default 3), medians:
#  - save vs `dd if=/dev/zero bs=64M conv=fsync` of the same bytes to the same directory;
#  - load (every checksum verified) vs `dd of=/dev/null` reading them back, page cache dropped;
#  - vs torch.save (plus fsync) and torch.load in Debian's python3-torch;
#  - the training-loop stall of an asynchronous checkpoint (blocking copy, and pipelined with the
#    next step's read phase) vs a synchronous one, medians of STALL_ROUNDS (default 5).
# Dropping the page cache needs root; without it reads come from memory for every contender.
# Usage: bench/run_ckpt.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
bench="$build/bench/ckpt_benchmark"
sizes=${SIZES:-"1 4"}
rounds=${ROUNDS:-3}
work=$(mktemp -d "${2:-/tmp}/pillar-ckpt-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
now() { date +%s.%N; }
results="$work/results"
run_dd() {
  drop; t0=$(now)
  dd if=/dev/zero of="$work/dd.bin" bs=64M count=$(($1 * 16)) conv=fsync status=none
  t1=$(now); drop; t2=$(now)
  dd if="$work/dd.bin" of=/dev/null bs=64M status=none
  t3=$(now); rm -f "$work/dd.bin"
  echo "$1 dd $(awk "BEGIN{print $t1 - $t0}") $(awk "BEGIN{print $t3 - $t2}")" >> "$results"
}
run_pillar() {
  drop
  save=$("$bench" save "$work/run" "$1"); drop
  load=$("$bench" load "$work/run"); rm -rf "$work/run"
  echo "$1 pillar $save $load" >> "$results"
}
run_torch() {
  drop
  echo "$1 torch $(/usr/bin/python3 "$root/bench/torch_save_peer.py" "$work" "$1")" >> "$results"
}
for size in $sizes; do
  for round in $(seq "$rounds"); do
    # The order rotates: this VM's disk throughput drifts within a run.
    case $((round % 3)) in
      1) run_dd "$size"; run_pillar "$size"; run_torch "$size" ;;
      2) run_pillar "$size"; run_torch "$size"; run_dd "$size" ;;
      0) run_torch "$size"; run_dd "$size"; run_pillar "$size" ;;
    esac
  done
  echo "$size stall $("$bench" stall "$work/stall" "$size" "${STALL_ROUNDS:-5}")" >> "$results"
  rm -rf "$work/stall"
done
/usr/bin/python3 - "$results" "$rounds" <<'PY' | tee "$root/bench/results/ckpt-latest.md"
import collections, statistics, sys
rows = collections.defaultdict(list)
stall = {}
for line in open(sys.argv[1]):
    parts = line.split()
    size, who = int(parts[0]), parts[1]
    if who == "stall":
        stall[size] = [float(x) for x in parts[2:]]
    else:
        rows[(size, who)].append((float(parts[2]), float(parts[3])))
def med(size, who, i):
    return statistics.median(r[i] for r in rows[(size, who)])
print(f"median of {sys.argv[2]} rounds; GiB/s = size / seconds")
print()
print("| size | operation | pillar | dd | ratio (pillar / dd) | torch | ratio (torch time / pillar time) |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for size in sorted({s for s, _ in rows}):
    for i, op in ((0, "save (fsynced)"), (1, "load (verified)")):
        p, d, t = med(size, "pillar", i), med(size, "dd", i), med(size, "torch", i)
        print(f"| {size} GiB | {op} | {p:.2f} s ({size / p:.2f} GiB/s) | {d:.2f} s ({size / d:.2f} GiB/s) "
              f"| {d / p:.2f}x | {t:.2f} s | {t / p:.2f}x |")
print()
print("stall: the time the loop was blocked by the checkpoint, as a share of the synchronous save;")
print("slowdown: the loop's wall time over the loop without a checkpoint, as a share of the sync one's")
print()
print("| size | sync save | async: stall | share | pipelined: stall | share | loop alone | slowdown async | pipelined | sync |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for size, (base, a, p, s, ba, bp, bs) in sorted(stall.items()):
    print(f"| {size} GiB | {bs:.3f} s | {ba:.3f} s | {100 * ba / bs:.1f} % | {bp * 1000:.2f} ms "
          f"| {100 * bp / bs:.2f} % | {base:.2f} s | {a - base:+.2f} s ({100 * (a - base) / (s - base):.0f} %) "
          f"| {p - base:+.2f} s ({100 * (p - base) / (s - base):.0f} %) | {s - base:+.2f} s |")
PY
