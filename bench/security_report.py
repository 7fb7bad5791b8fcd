#!/usr/bin/python3
"""Turns bench/run_security.sh's raw outputs into the markdown of docs/benchmarks.md
("Security chain"). Medians over rounds and repetitions."""
import json
import re
import statistics
import sys

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    lat = {}
    for pct, value, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        lat[pct] = float(value) * UNITS[unit]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return rps, lat.get("50"), lat.get("99"), int(non2xx.group(1)) if non2xx else 0


def main():
    out, rounds = sys.argv[1], int(sys.argv[2])
    micro = json.load(open(f"{out}/micro.json"))
    medians = {}
    for b in micro["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"] + ("/" + b["label"] if b.get("label") else "")
            medians[name] = b["real_time"]
    print("Micro (ns per request, median of 5 repetitions):\n")
    print("| step | pillar |")
    print("|---|---:|")
    for name in ["BM_Authenticate", "BM_Authorize", "BM_Admit", "BM_Chain/real_time/threads:1",
                 "BM_Chain/real_time/threads:2", "BM_AdmitRedis/real_time"]:
        print(f"| {name} | {medians.get(name, float('nan')):.0f} |")
    ping = None
    for line in open(f"{out}/redis_ping.csv"):
        cells = [c.strip('"') for c in line.strip().split(",")]
        if cells[0].startswith("PING") and len(cells) > 3:
            ping = float(cells[4])  # p50 latency, ms
    script = None
    for line in open(f"{out}/redis_script.csv"):
        cells = [c.strip('"') for c in line.strip().split(",")]
        if cells[0].upper().startswith("EVALSHA") and len(cells) > 4:
            script = float(cells[4])  # p50 latency, ms
    if ping is not None:
        print(f"\nFor scale: redis-benchmark PING from one client, p50 {ping * 1000:.0f} us on this machine.")
    if script is not None:
        print(f"The limit script itself (EVALSHA with the three limits, redis-benchmark, one client): "
              f"p50 {script * 1000:.0f} us.")
    pyjwt = dict(line.split() for line in open(f"{out}/pyjwt.txt"))
    print("\nJWT verification (us per token):\n")
    print("| alg | PyJWT | pillar, new token | ratio | pillar, repeated token | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for i, alg in enumerate(["RS256", "ES256", "EdDSA"]):
        peer = float(pyjwt[alg]) / 1000
        first = medians.get(f"BM_JwtVerify/{i}/{alg}", float("nan")) / 1000
        again = medians.get(f"BM_JwtVerifyRepeated/{i}/{alg}", float("nan")) / 1000
        print(f"| {alg} | {peer:.1f} | {first:.1f} | {peer / first:.1f}x | {again:.3f} | "
              f"{peer / again:.0f}x |")

    runs = {}
    for name in ["off", "on", "shared"]:
        for conns in ["c64", "c1"]:
            runs[(name, conns)] = [wrk(f"{out}/{name}_{conns}_r{r}.txt") for r in range(1, rounds + 1)]
    med = lambda xs: statistics.median(xs)
    print("\nEnd to end, infer on the demo model (medians of", rounds, "rounds):\n")
    print("| server | req/s at 64 conns | vs chain off | p50 at 1 conn (ms) | p99 at 1 conn (ms) | non-2xx |")
    print("|---|---:|---:|---:|---:|---:|")
    off_rps = med([r[0] for r in runs[("off", "c64")]])
    for name, label in [("off", "chain off (built-in policy, no limits)"),
                        ("on", "chain on (1,000 rules, 3 limits, embedded)"),
                        ("shared", "chain on, limits in Redis")]:
        rps = med([r[0] for r in runs[(name, "c64")]])
        p50 = med([r[1] for r in runs[(name, "c1")]])
        p99 = med([r[2] for r in runs[(name, "c1")]])
        non2xx = sum(r[3] for r in runs[(name, "c64")] + runs[(name, "c1")])
        print(f"| {label} | {rps:.0f} | {rps / off_rps:.2f}x | {p50:.3f} | {p99:.3f} | {non2xx} |")
    on50 = med([r[1] for r in runs[("on", "c1")]])
    on99 = med([r[2] for r in runs[("on", "c1")]])
    re50 = med([r[1] for r in runs[("shared", "c1")]])
    re99 = med([r[2] for r in runs[("shared", "c1")]])
    print(f"\nRedis adds {1000 * (re50 - on50):.0f} us at p50 and {1000 * (re99 - on99):.0f} us at p99"
          " per request over the embedded limiter (one round trip, pipelined).")
    ratios = [s[0] / o[0] for s, o in zip(runs[("shared", "c64")], runs[("on", "c64")])]
    print(f"Limits in Redis against embedded, 64 connections, per round: "
          f"{med(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}x] (goal >= 0.85x).")
    if script is not None:
        budget = script * 1000 + 20
        added = 1000 * (re50 - on50)
        print(f"Added p50 {added:.0f} us against the script's round trip + 20 us = {budget:.0f} us: "
              f"{'met' if added <= budget else 'not met'}.")


if __name__ == "__main__":
    main()
