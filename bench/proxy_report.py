#!/usr/bin/env python3
"""Report of bench/run_proxy.sh: medians over rounds, and the range of each round's ratio.

Usage: proxy_report.py RAW_DIR ROUNDS
"""
import re
import statistics
import sys


def parse(path):
    text = open(path).read()
    unit = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    out = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}
    for q in ("50", "99"):
        m = re.search(rf"^\s+{q}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        out["p" + q] = float(m.group(1)) * unit[m.group(2)]
    m = re.search(r"non_200 (\d+)", text)
    out["non200"] = int(m.group(1)) if m else -1
    # wrk's own count of errors (non-2xx/3xx), as a check on the script's.
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        out["non200"] = max(out["non200"], int(m.group(1)))
    errors = re.search(r"Socket errors: .*", text)
    out["errors"] = errors.group(0) if errors else ""
    return out


raw, rounds = sys.argv[1], int(sys.argv[2])
names = ("upstream", "pillar", "haproxy", "nginx")
data = {n: {c: [parse(f"{raw}/{n}_c{c}_r{r}.txt") for r in range(1, rounds + 1)] for c in (1, 64)}
        for n in names}
# socat, a byte relay, at one connection only: the floor of what a hop adds.
data["relay"] = {1: [parse(f"{raw}/relay_c1_r{r}.txt") for r in range(1, rounds + 1)]}


def median(name, conns, key):
    return statistics.median(d[key] for d in data[name][conns])


def ratio_range(f):
    values = [f(r) for r in range(rounds)]
    return statistics.median(values), min(values), max(values)


rows = []
for peer in ("haproxy", "nginx"):
    m, lo, hi = ratio_range(lambda r: data["pillar"][64][r]["rps"] / data[peer][64][r]["rps"])
    goal = ">= 1.0x" if peer == "haproxy" else ""
    rows.append((f"requests/s, 64 connections; peer: {peer}", f"{median('pillar', 64, 'rps'):.0f}",
                 f"{median(peer, 64, 'rps'):.0f}", f"{m:.2f}x [{lo:.2f}-{hi:.2f}x]", goal))
    m, lo, hi = ratio_range(lambda r: data[peer][64][r]["p99"] / data["pillar"][64][r]["p99"])
    rows.append((f"p99 latency ms, 64 connections; peer: {peer} (ratio > 1: pillar lower)",
                 f"{median('pillar', 64, 'p99'):.2f}", f"{median(peer, 64, 'p99'):.2f}",
                 f"{m:.2f}x [{lo:.2f}-{hi:.2f}x]", "no worse" if peer == "haproxy" else ""))
direct = median("upstream", 1, "p50")
for name in ("pillar", "haproxy", "nginx", "relay"):
    added = [(data[name][1][r]["p50"] - data["upstream"][1][r]["p50"]) * 1000 for r in range(rounds)]
    label = "socat, a byte relay (the floor)" if name == "relay" else name
    rows.append((f"added median latency per hop, 1 connection, us: {label}",
                 f"{statistics.median(added):.0f} [{min(added):.0f}-{max(added):.0f}]",
                 f"direct p50 {direct * 1000:.0f} us", "", "< 30 us" if name == "pillar" else ""))

print("| comparison | pillar | peer | ratio [range] | goal |")
print("| --- | --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(row) + " |")
print()
print("| gateway | 1 conn p50 ms | 64 conn requests/s | 64 conn p99 ms | non-200 |")
print("| --- | --- | --- | --- | --- |")
for name in names:
    non200 = sum(d["non200"] for c in (1, 64) for d in data[name][c])
    print(f"| {name} | {median(name, 1, 'p50'):.3f} | {median(name, 64, 'rps'):.0f} | "
          f"{median(name, 64, 'p99'):.2f} | {non200} |")
