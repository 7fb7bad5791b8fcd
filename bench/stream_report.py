#!/usr/bin/python3
"""The streaming relay's report (bench/run_stream.sh): medians and ranges over rounds."""
import json
import statistics
import sys

out, rounds = sys.argv[1], int(sys.argv[2])


def load(name, r):
    with open(f"{out}/{name}_r{r}.json") as f:
        return json.load(f)


rows = {name: [load(name, r) for r in range(1, rounds + 1)] for name in ("upstream", "pillar", "nginx")}
med = lambda xs: statistics.median(xs)
print("| target | events/s (median, range) | time to first event p50 ms | p99 ms | failures |")
print("| --- | --- | --- | --- | --- |")
for name, rs in rows.items():
    ev = [x["events_per_s"] for x in rs]
    print(f"| {name} | {med(ev):.0f} [{min(ev):.0f}-{max(ev):.0f}] | "
          f"{med([x['ttft_p50_ms'] for x in rs]):.2f} | {med([x['ttft_p99_ms'] for x in rs]):.2f} | "
          f"{sum(x['failures'] for x in rs)} |")
ratios = [p["events_per_s"] / n["events_per_s"] for p, n in zip(rows["pillar"], rows["nginx"])]
added_pillar = [p["ttft_p50_ms"] - u["ttft_p50_ms"] for p, u in zip(rows["pillar"], rows["upstream"])]
added_nginx = [n["ttft_p50_ms"] - u["ttft_p50_ms"] for n, u in zip(rows["nginx"], rows["upstream"])]
print()
print(f"- events/s, pillar vs nginx: {med(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}x]")
print(f"- time to first event added to the upstream's, median: pillar {med(added_pillar):.2f} ms "
      f"[{min(added_pillar):.2f}-{max(added_pillar):.2f}], nginx {med(added_nginx):.2f} ms "
      f"[{min(added_nginx):.2f}-{max(added_nginx):.2f}]")
mem = dict(line.split() for line in open(f"{out}/memory.txt"))
idle = int(mem["idle_rss_kb"])
peaks = [int(v) for k, v in mem.items() if k.endswith("_peak_rss_kb")]
if peaks:
    print(f"- pillar's resident memory: idle {idle / 1024:.1f} MiB, relaying "
          f"{max(peaks) / 1024:.1f} MiB at its peak: +{(max(peaks) - idle) / 1024:.1f} MiB")
