#!/usr/bin/python3
"""Turns the raw outputs of bench/run_all.sh into the markdown table of docs/benchmarks.md.

Medians over rounds; ratios are pillar / peer for throughput and peer / pillar for latency,
so a ratio above 1 always means pillar did better.
"""
import re
import statistics
import sys

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    lat = {}
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        lat[pct] = float(value) * UNITS[unit]
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket_errors = re.search(r"Socket errors: (.*)", text)
    return {"rps": rps, "p50": lat.get("50"), "p99": lat.get("99"),
            "cpu_us": cpu_us(path, requests),
            "non2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": socket_errors.group(1) if socket_errors else ""}


def cpu_us(wrk_path, requests):
    """The server's CPU microseconds a request over one run (run_all.sh's .cpu file beside the
    wrk output: clock ticks of the server's processes, ticks a second), or None without it."""
    try:
        ticks, hz = open(wrk_path[:-len(".txt")] + ".cpu").read().split()
    except OSError:
        return None
    return int(ticks) / int(hz) * 1e6 / requests if requests else None


def histogram(text, name, labels=""):
    """Cumulative buckets {le: count} of one histogram series."""
    buckets = {}
    pattern = re.escape(name) + r"_bucket\{" + re.escape(labels) + r"(?:,)?le=\"([^\"]+)\"\} (\d+)"
    for le, count in re.findall(pattern, text):
        buckets[float("inf") if le == "+Inf" else float(le)] = int(count)
    return buckets


def median_from_delta(before, after):
    """Median of the observations between two snapshots, interpolated inside its bucket."""
    les = sorted(after)
    counts = [after[le] - before.get(le, 0) for le in les]
    total = counts[-1]
    if total == 0:
        return None
    half = total / 2
    prev_le, prev_count = 0.0, 0
    for le, count in zip(les, counts):
        if count >= half:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (half - prev_count) / max(1, count - prev_count)
        prev_le, prev_count = le, count
    return None


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def main():
    out, rounds = sys.argv[1], int(sys.argv[2])
    r = range(1, rounds + 1)
    runs, per_round = {}, {}
    for name in ["pillar_infer_c1", "fastapi_infer_c1", "pillar_infer_c64", "fastapi_infer_c64",
                 "plain_infer_c1", "plain_infer_c64", "pillar_http_c64", "nginx_http_c64",
                 "noaudit_infer_c64", "noaudit_http_c64"]:
        results = [wrk(f"{out}/{name}_r{i}.txt") for i in r]
        per_round[name] = results
        runs[name] = {k: med([x[k] for x in results]) for k in ("rps", "p50", "p99", "cpu_us")}
        runs[name]["errors"] = sum(x["non2xx"] for x in results)

    def spread(a, b):
        """The range over rounds of a's requests/s over b's, each round's pair side by side."""
        ratios = [x["rps"] / y["rps"] for x, y in zip(per_round[a], per_round[b])]
        return f"[{min(ratios):.2f}-{max(ratios):.2f}x]"
    overhead, stages = [], {}
    for i in r:
        before = open(f"{out}/pillar_c1_r{i}_before.prom").read()
        after = open(f"{out}/pillar_c1_r{i}_after.prom").read()
        overhead.append(median_from_delta(histogram(before, "pillar_request_overhead_seconds"),
                                          histogram(after, "pillar_request_overhead_seconds")))
        for stage in re.findall(r'pillar_stage_duration_seconds_count\{stage="([^"]+)"\}', after):
            label = f'stage="{stage}",'
            stages.setdefault(stage, []).append(median_from_delta(
                histogram(before, "pillar_stage_duration_seconds", label),
                histogram(after, "pillar_stage_duration_seconds", label)))

    p, f = runs["pillar_infer_c64"], runs["fastapi_infer_c64"]
    p1, f1 = runs["pillar_infer_c1"], runs["fastapi_infer_c1"]
    ph, ng = runs["pillar_http_c64"], runs["nginx_http_c64"]
    print(f"Medians of {rounds} rounds; ratio > 1 means pillar did better.\n")
    print("| comparison | pillar | peer | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    for label, peer, peer1, name in [
            ("FastAPI + uvicorn[standard] (httptools, uvloop, 2 workers)", f, f1, "fastapi_infer_c64"),
            ("FastAPI + plain uvicorn (h11, asyncio, 1 worker)", runs["plain_infer_c64"],
             runs["plain_infer_c1"], "plain_infer_c64")]:
        print(f"| infer, 64 connections, requests/s; peer: {label} | {p['rps']:.0f} | {peer['rps']:.0f} | "
              f"{p['rps'] / peer['rps']:.1f}x {spread('pillar_infer_c64', name)} | >= 10x |")
        print(f"| infer, 64 connections, p99 latency ms | {p['p99']:.2f} | {peer['p99']:.2f} | "
              f"{peer['p99'] / p['p99']:.1f}x | lower |")
        print(f"| infer, 1 connection, p50 latency ms | {p1['p50']:.3f} | {peer1['p50']:.3f} | "
              f"{peer1['p50'] / p1['p50']:.1f}x | lower |")
        print(f"| infer, 1 connection, requests/s | {p1['rps']:.0f} | {peer1['rps']:.0f} | "
              f"{p1['rps'] / peer1['rps']:.1f}x | |")
    print(f"| HTTP layer, 64 connections, requests/s (pillar GET /v2 with key; peer: nginx return 200) | "
          f"{ph['rps']:.0f} | {ng['rps']:.0f} | {ph['rps'] / ng['rps']:.2f}x "
          f"{spread('pillar_http_c64', 'nginx_http_c64')} | >= 0.8x |")
    print(f"| HTTP layer, 64 connections, p99 latency ms | {ph['p99']:.2f} | {ng['p99']:.2f} | "
          f"{ng['p99'] / ph['p99']:.2f}x | |")
    for label, on, off in [("GET /v2 with key", "pillar_http_c64", "noaudit_http_c64"),
                           ("infer", "pillar_infer_c64", "noaudit_infer_c64")]:
        print(f"| audit cost: {label}, 64 connections, requests/s (peer: pillar with [audit] "
              f"backend = \"off\") | {runs[on]['rps']:.0f} | {runs[off]['rps']:.0f} | "
              f"{runs[on]['rps'] / runs[off]['rps']:.2f}x {spread(on, off)} | >= 0.95x |")
    ov = med(overhead)
    print(f"| server-side overhead, 1 connection, median us (Triton's published figure: 36 us) | "
          f"{ov * 1e6:.1f} | 36 | {36 / (ov * 1e6):.2f}x | < 50 us |")
    print()
    cpu_rows = [("infer, 64 connections; peer: FastAPI + uvicorn[standard]", "pillar_infer_c64",
                 "fastapi_infer_c64"),
                ("GET /v2 with a key, 64 connections; peer: nginx return 200", "pillar_http_c64",
                 "nginx_http_c64"),
                ("audit cost, infer, 64 connections; peer: pillar, audit off", "pillar_infer_c64",
                 "noaudit_infer_c64"),
                ("audit cost, GET /v2, 64 connections; peer: pillar, audit off", "pillar_http_c64",
                 "noaudit_http_c64")]
    if all(runs[n]["cpu_us"] == runs[n]["cpu_us"] for row in cpu_rows for n in row[1:]):  # no NaN
        print("CPU per request: the server's processes (workers included), user + system time "
              "over each run / its requests; ratio = peer / pillar, above 1 means pillar used less.")
        print()
        print("| comparison | pillar us | peer us | ratio [range] |")
        print("| --- | --- | --- | --- |")
        for label, a, b in cpu_rows:
            ratios = [y["cpu_us"] / x["cpu_us"] for x, y in zip(per_round[a], per_round[b])]
            print(f"| {label} | {runs[a]['cpu_us']:.1f} | {runs[b]['cpu_us']:.1f} | "
                  f"{runs[b]['cpu_us'] / runs[a]['cpu_us']:.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}x] |")
        print()
    print("Per-stage median time at 1 connection (us), from pillar_stage_duration_seconds:")
    print()
    print("| " + " | ".join(stages) + " |")
    print("|" + " --- |" * len(stages))
    print("| " + " | ".join(f"{med(v) * 1e6:.1f}" for v in stages.values()) + " |")
    errors = {k: v["errors"] for k, v in runs.items() if v["errors"]}
    if errors:
        print(f"\nNon-2xx responses during the runs: {errors}")


if __name__ == "__main__":
    main()
