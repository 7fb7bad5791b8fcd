#!/usr/bin/env python3
"""Precision and recall of `pillar guard scan` per entity type over a labelled corpus made by
guard_corpus.py (docs/benchmarks.md, "Content safety"). A finding counts only when its type and
its exact byte span match a label; anything else found is a false positive.

Usage: guard_quality.py PILLAR TEXT_FILE LABELS_FILE [--config FILE] [--types T,T] [--misses]
(prints a Markdown table; --config: the [guard] table scan reads; --types: only these rows)
"""
import bisect
import collections
import json
import subprocess
import sys

pillar, text_path, labels_path = sys.argv[1:4]
data = open(text_path, "rb").read()
line_starts = [0]
for i, b in enumerate(data):
    if b == 10:
        line_starts.append(i + 1)
gold, bare = set(), set()
for row in map(json.loads, open(labels_path)):
    base = line_starts[row["line"]]
    gold.add((row["type"], base + row["start"], base + row["end"]))
    if not row["context"]:
        bare.add((row["type"], base + row["start"], base + row["end"]))
def option(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


config, only = option("--config"), option("--types")
run = subprocess.run([pillar, "guard", "scan", text_path] + (["-c", config] if config else []),
                     capture_output=True, text=True)
if run.returncode not in (0, 1):
    sys.exit(f"pillar guard scan failed: {run.stderr}")
found = {(f["type"], f["start"], f["end"]) for f in map(json.loads, run.stdout.splitlines())}
types = sorted({t for t, _, _ in gold} | {t for t, _, _ in found})
tp, fp, fn = collections.Counter(), collections.Counter(), collections.Counter()
for f in found:
    (tp if f in gold else fp)[f[0]] += 1
for g in gold:
    if g not in found:
        fn[g[0]] += 1
if "--misses" in sys.argv:
    for t, s, e in sorted((found - gold) | (gold - found), key=lambda x: x[1]):
        line = bisect.bisect_right(line_starts, s) - 1
        kind = "FP" if (t, s, e) in found else "FN"
        print(kind, t, data[line_starts[line]:data.index(b"\n", s)].decode(errors="replace"),
              file=sys.stderr)
print("| entity type | labelled | found | precision | recall | recall with a naming word "
      "| recall without |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for t in types:
    if only and t not in only.split(","):
        continue
    labelled = tp[t] + fn[t]
    p = tp[t] / (tp[t] + fp[t]) if tp[t] + fp[t] else 1.0
    r = tp[t] / labelled if labelled else 1.0
    named = [g for g in gold - bare if g[0] == t]
    unnamed = [g for g in bare if g[0] == t]
    rn = sum(g in found for g in named) / max(1, len(named))
    ru = sum(g in found for g in unnamed) / max(1, len(unnamed))
    print(f"| {t} | {labelled} | {tp[t] + fp[t]} | {p:.3f} | {r:.3f} | {rn:.3f} | {ru:.3f} |")
if only:
    sys.exit(0)
all_tp, all_fp, all_fn = sum(tp.values()), sum(fp.values()), sum(fn.values())
print(f"| all | {all_tp + all_fn} | {all_tp + all_fp} | {all_tp / max(1, all_tp + all_fp):.3f} "
      f"| {all_tp / max(1, all_tp + all_fn):.3f} | | |")
