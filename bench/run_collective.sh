#!/usr/bin/env bash
# Cluster-validation benchmarks beside their peers (docs/benchmarks.md, "Collectives"):
#  - harness overhead: `pillar bench collective allreduce` on Open MPI against a hand-written
#    MPI_Allreduce timing loop (bench/mpi_allreduce_peer.cc), same sizes (SIZES_MIN..SIZES_MAX,
#    doubling), same iterations, out-of-place float sums, 2 ranks; ROUNDS rounds alternating;
#  - Gloo against Open MPI: pillar's allreduce busbw on both backends, 2 and 4 ranks;
#  - pillar health's memory-bandwidth triad against memcpy over the same working set;
#  - the harness's own cost per timed call: the timed loop over a communicator that returns at
#    once (collective_overhead_benchmark), and pillar against the hand-written loop on one rank
#    at 8 B (MPI_Allreduce is then a local copy: nothing hides a nanosecond).
# The harness comparison pairs each pillar run with the loop run next to it (this VM's
# bandwidth jumps between modes from one minute to the next) and reports the median of the
# paired ratios over ROUNDS (default 9); the backend comparison runs BACKEND_ROUNDS (default 3).
# Usage: bench/run_collective.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
pillar="$build/src/pillar"
rounds=${ROUNDS:-9}
backend_rounds=${BACKEND_ROUNDS:-3}
min=${SIZES_MIN:-1048576}
max=${SIZES_MAX:-67108864}
iters=${ITERS:-50}
work=$(mktemp -d /tmp/pillar-collective-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun="mpirun --oversubscribe"

# "bytes busbw" rows of pillar's out-of-place column.
pillar_rows() { awk '!/^#/ && NF >= 13 { print $1, $8 }'; }

gloo() {  # ranks, extra args: rank 0's output
  local n=$1; shift
  rm -rf "$work/rdv"; mkdir -p "$work/rdv"
  for r in $(seq 0 $((n - 1))); do
    "$pillar" bench collective allreduce --backend gloo --iface lo --rendezvous "file:$work/rdv" \
      --rank "$r" --world-size "$n" "$@" > "$work/gloo.$r" &
  done
  wait
  cat "$work/gloo.0"
}

for round in $(seq "$rounds"); do
  args=(-b "$min" -e "$max" -f 2 -n "$iters" -w 1 -c 0)
  if (( round % 2 )); then
    $mpirun -np 2 "$pillar" bench collective allreduce "${args[@]}" | pillar_rows | sed "s/^/pillar $round /" >> "$work/overhead"
    $mpirun -np 2 "$build/bench/mpi_allreduce_peer" "$min" "$max" "$iters" | sed "s/^/peer $round /" >> "$work/overhead"
  else
    $mpirun -np 2 "$build/bench/mpi_allreduce_peer" "$min" "$max" "$iters" | sed "s/^/peer $round /" >> "$work/overhead"
    $mpirun -np 2 "$pillar" bench collective allreduce "${args[@]}" | pillar_rows | sed "s/^/pillar $round /" >> "$work/overhead"
  fi
  (( round <= backend_rounds )) && for n in 2 4; do
    $mpirun -np "$n" "$pillar" bench collective allreduce "${args[@]}" | pillar_rows | sed "s/^/mpi $n /" >> "$work/backends"
    gloo "$n" "${args[@]}" | pillar_rows | sed "s/^/gloo $n /" >> "$work/backends"
  done
  echo "$("$build/bench/memory_bandwidth_benchmark" 768 "$(nproc)")" >> "$work/memory"
  "$build/bench/collective_overhead_benchmark" >> "$work/null"
  $mpirun -np 1 "$pillar" bench collective allreduce -b 8 -e 8 -n 5000000 -w 1000 -c 0 \
    --json "$work/one.json" > /dev/null
  /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['out_of_place']['time_us'] * 1000)" \
    "$work/one.json" >> "$work/one.pillar"
  $mpirun -np 1 "$build/bench/mpi_allreduce_peer" 8 8 5000000 | awk '{ print $3 * 1e9 }' >> "$work/one.peer"
done

/usr/bin/python3 - "$work" "$rounds" "$backend_rounds" <<'PY' | tee "$root/bench/results/collective-latest.md"
import collections, statistics, sys
work, rounds = sys.argv[1], sys.argv[2]
def table(path, key_fields):
    rows = collections.defaultdict(list)
    for line in open(path):
        parts = line.split()
        rows[tuple(parts[:key_fields])].append(float(parts[key_fields]))
    return {k: statistics.median(v) for k, v in rows.items()}
# "who round bytes busbw [seconds]" lines; each round's pillar row paired with its loop row.
runs = collections.defaultdict(dict)
for line in open(f"{work}/overhead"):
    who, rnd, size, bw = line.split()[:4]
    runs[(rnd, int(size))][who] = float(bw)
over = {}
for who in ("pillar", "peer"):
    for s in {k[1] for k in runs}:
        over[(who, str(s))] = statistics.median(r[who] for k, r in runs.items() if k[1] == s)
sizes = sorted({k[1] for k in runs})
print(f"busbw in GB/s (1e9 B/s), out-of-place float sum, 2 ranks, Open MPI; {rounds} rounds, "
      "medians; the ratio is the median of each round's pillar / loop")
print()
print("| size | pillar bench collective | hand-written MPI_Allreduce loop | pillar / loop (paired) |")
print("| ---: | ---: | ---: | ---: |")
ratios = []
for s in sizes:
    paired = statistics.median(r["pillar"] / r["peer"] for k, r in runs.items() if k[1] == s)
    ratios.append(paired)
    print(f"| {s} | {over[('pillar', str(s))]:.3f} | {over[('peer', str(s))]:.3f} | {paired:.3f} |")
print(f"| all (median of the sizes' ratios) | | | **{statistics.median(ratios):.3f}** |")
print()
null_ns = statistics.median(float(l) for l in open(f"{work}/null"))
one_p = statistics.median(float(l) for l in open(f"{work}/one.pillar"))
one_q = statistics.median(float(l) for l in open(f"{work}/one.peer"))
added = max(one_p - one_q, 0.0)
print(f"harness loop over a null communicator: {null_ns:.2f} ns a call")
print(f"one rank, 8 B: pillar {one_p:.2f} ns, hand-written loop {one_q:.2f} ns a call: pillar adds {added:.2f} ns")
print()
print("| size | loop's time per call (2 ranks) | what pillar adds, as a share |")
print("| ---: | ---: | ---: |")
for s in sizes:
    seconds = s / (over[("peer", str(s))] * 1e9)  # 2 ranks: busbw == algbw
    print(f"| {s} | {seconds * 1e6:.1f} us | {100 * added * 1e-9 / seconds:.5f} % |")
print()
back = table(f"{work}/backends", 3)
print(f"{sys.argv[3]} rounds, medians")
print()
print("| ranks | size | Open MPI busbw | Gloo busbw | Gloo / MPI |")
print("| ---: | ---: | ---: | ---: | ---: |")
for n in ("2", "4"):
    for s in sizes:
        m, g = back[("mpi", n, str(s))], back[("gloo", n, str(s))]
        print(f"| {n} | {s} | {m:.3f} | {g:.3f} | {g / m:.2f} |")
print()
mem = [tuple(map(float, l.split())) for l in open(f"{work}/memory")]
triad = statistics.median(t for t, _ in mem)
copy = statistics.median(c for _, c in mem)
print("| memory bandwidth (768 MiB, all cores) | GB/s |")
print("| --- | ---: |")
print(f"| pillar health triad (STREAM: 24 B per element) | {triad:.2f} |")
print(f"| memcpy (2 B per byte copied) | {copy:.2f} |")
print(f"| triad / memcpy | {triad / copy:.2f} |")
PY
