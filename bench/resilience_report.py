#!/usr/bin/env python3
"""Turns bench/run_resilience.sh's raw outputs into the tables of docs/benchmarks.md.

Usage: resilience_report.py RAW_DIR ROUNDS. Medians over rounds, with the range.
"""
import json
import os
import statistics
import sys

raw, rounds = sys.argv[1], int(sys.argv[2])
GATEWAYS = ("pillar", "haproxy")


def load(name):
    path = os.path.join(raw, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    return json.loads(text) if name.endswith(".json") else text


def series(pattern, field):
    values = []
    for r in range(1, rounds + 1):
        data = load(pattern.format(r=r))
        if data is not None and data.get(field) is not None:
            values.append(float(data[field]))
    return values


def cell(values, fmt="{:.0f}"):
    if not values:
        return "-"
    median = statistics.median(values)
    if len(values) == 1:
        return fmt.format(median)
    return (fmt + " [" + fmt + "-" + fmt + "]").format(median, min(values), max(values))


print("### Failure recovery (one of three replicas fails under 4 closed-loop clients)")
print()
print("| scenario | gateway | requests | failed | error window (s) |")
print("| --- | --- | --- | --- | --- |")
for scenario, label in (("kill", "SIGKILL at 2 s"), ("stop", "SIGSTOP at 2 s, SIGCONT at 5 s")):
    for gw in GATEWAYS:
        pattern = "recovery_%s_%s_r{r}.json" % (scenario, gw)
        print("| %s | %s | %s | %s | %s |" % (
            label, gw, cell(series(pattern, "sent")), cell(series(pattern, "failed")),
            cell(series(pattern, "window_s"), "{:.2f}")))
print()
print("### Shedding (capacity 40/s, offered 80/s, 250 ms deadline)")
print()
print("| gateway | admitted p99 (ms) | refused | refusal p50 / p99 (ms) | with Retry-After | "
      "retried after it: ok of | failed otherwise |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for gw in GATEWAYS:
    pattern = "shed_%s_r{r}.json" % gw
    print("| %s | %s | %s | %s / %s | %s | %s of %s | %s |" % (
        gw, cell(series(pattern, "ok_p99_ms"), "{:.1f}"), cell(series(pattern, "refused")),
        cell(series(pattern, "refused_p50_ms"), "{:.1f}"),
        cell(series(pattern, "refused_p99_ms"), "{:.1f}"),
        cell(series(pattern, "refused_with_retry_after")),
        cell(series(pattern, "retried_ok")), cell(series(pattern, "retried")),
        cell(series(pattern, "failed"))))
print()
print("### Memory (resident, after 5 s of traffic over every backend)")
print()
print("| gateway | 1 backend x 1 endpoint (MB) | 100 backends x 10 endpoints (MB) | difference (MB) |")
print("| --- | --- | --- | --- |")
for gw in GATEWAYS:
    small, large, diff = [], [], []
    for r in range(1, rounds + 1):
        a, b = load("mem_%s_1_r%d.kb" % (gw, r)), load("mem_%s_100_r%d.kb" % (gw, r))
        if a and b:
            small.append(int(a) / 1024)
            large.append(int(b) / 1024)
            diff.append((int(b) - int(a)) / 1024)
    print("| %s | %s | %s | %s |" % (gw, cell(small, "{:.1f}"), cell(large, "{:.1f}"),
                                      cell(diff, "{:.1f}")))
