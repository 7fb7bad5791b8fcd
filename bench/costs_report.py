#!/usr/bin/env python3
"""The per-request cost table of bench/run_costs.sh, from its raw directory.

For each route: instructions per request (callgrind, every thread, split by where they ran),
allocations per request (calls to malloc), and system calls per request (perf stat on the
kernel's syscall tracepoints), with the heaviest calls named.
"""
import re
import subprocess
import sys
from pathlib import Path

ROUTES = [("get", "GET /v2 with a key"), ("infer", "inference, digits (1 row)")]
# Where instructions ran: each thread is named by a function only it runs.
PLACES = [
    ("model instances", r"BatchingRunner::(InstanceLoop|NextBatch)"),
    ("audit writer", r"AuditLog::(Run|TakeBatch|WriteHeldBatch)"),
    ("job queue", r"JobQueue::"),
    ("event loops", r"HttpServer::Start\(\)|Session<(false|true)>::OnRequest"),
]
# The model's own work, wherever it ran (inclusive).
MODEL = r"TorchBackend::Execute"


def annotate(path, *flags):
    return subprocess.run(["callgrind_annotate", *flags, str(path)], capture_output=True,
                          text=True, check=True).stdout


def number(text):
    text = text.replace(",", "")
    return int(text) if text.isdigit() else 0  # callgrind_annotate writes "." for none


def instructions(directory):
    """All threads' instructions; each place's share (a thread goes to the first place one of
    whose functions it ran, the rest to "other"); and the model's forward pass, inclusive,
    wherever it ran."""
    total, places = 0, {}
    for path in sorted(Path(directory).iterdir()):
        text = annotate(path, "--inclusive=yes")
        lines = text.splitlines()
        thread = next((number(l.split()[0]) for l in lines if "PROGRAM TOTALS" in l), 0)
        model = next((number(l.split()[0]) for l in lines if re.search(MODEL, l)), 0)
        total += thread
        place = next((name for name, pattern in PLACES if re.search(pattern, text)), "other")
        places[place] = places.get(place, 0) + thread
        places["model's forward pass"] = places.get("model's forward pass", 0) + model
    return total, places


# The allocating entry points: glibc's malloc (its operator new calls it), or tcmalloc's malloc
# and its own operator new, which does not (the pillar binary links tcmalloc). tcmalloc's entry
# points are aliases of one another, so callgrind names them all by one of them
# ("operator new[](unsigned long)"), in an object it cannot name ("[???]": Debian's tcmalloc has
# no symbols file); libstdc++'s operator new, which calls glibc's malloc, is not counted again.
ALLOCATORS = re.compile(r"malloc\.c:malloc \[|"
                        r"\?\?\?:(malloc|tc_\w+|operator new(\[\])?\(unsigned long\)) "
                        r"\[(\?\?\?|[^\]]*tcmalloc[^\]]*)\]")


def allocations(directory):
    """Calls to the allocator, in every thread: the sum of its callers' call counts."""
    calls = 0
    for path in Path(directory).iterdir():
        lines = annotate(path, "--tree=caller").splitlines()
        for i, line in enumerate(lines):
            if "*  " in line and ALLOCATORS.search(line):
                j = i - 1
                while j >= 0 and "<" in lines[j]:
                    m = re.search(r"\(([\d,]+)x\)", lines[j])
                    if m:
                        calls += number(m.group(1))
                    j -= 1
    return calls


def syscalls(path):
    """perf stat -x, output: count,unit,event,...; the total under "all"."""
    calls = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        event = fields[2]
        if event == "raw_syscalls:sys_enter":
            calls["all"] = int(fields[0])
        elif event.startswith("syscalls:sys_enter_"):
            calls[event[len("syscalls:sys_enter_"):]] = int(fields[0])
    return calls


def main():
    raw = Path(sys.argv[1])
    print("| per request | " + " | ".join(title for _, title in ROUTES) + " |")
    print("| --- |" + " --- |" * len(ROUTES))
    rows = {}
    for route, _ in ROUTES:
        # Not counted where valgrind could not run the model (bench/run_costs.sh says why).
        counted = (raw / f"cg_{route}.requests").exists()
        if counted:
            n = int((raw / f"cg_{route}.requests").read_text())
            total, places = instructions(raw / f"cg_{route}")
            allocs = allocations(raw / f"cg_{route}")
        sn = int((raw / f"sc_{route}.requests").read_text())
        calls = syscalls(raw / f"syscalls_{route}.csv")
        total_calls = calls.pop("all", 0)
        rows.setdefault("requests measured (callgrind / perf)", []).append(
            f"{n} / {sn}" if counted else f"not counted / {sn}")
        rows.setdefault("instructions, all threads", []).append(
            f"{total / n:,.0f}" if counted else "not counted")
        for name in ["event loops", "model instances", "audit writer", "job queue", "other",
                     "model's forward pass"]:
            label = {"other": "- on other threads",
                     "model's forward pass": "- of which the model's forward pass (any thread)"
                     }.get(name, f"- on the {name}'s thread" if name == "job queue"
                           else f"- on the {name}")
            rows.setdefault(label, []).append(
                f"{places.get(name, 0) / n:,.0f}" if counted else "not counted")
        rows.setdefault("allocations (malloc calls)", []).append(
            f"{allocs / n:.1f}" if counted else "not counted")
        rows.setdefault("system calls", []).append(f"{total_calls / sn:.2f}")
        top = sorted(((k, v) for k, v in calls.items() if v > 0), key=lambda kv: -kv[1])[:8]
        rows.setdefault("- the most frequent", []).append(
            ", ".join(f"{name} {count / sn:.2f}" for name, count in top))
    for label, values in rows.items():
        print(f"| {label} | " + " | ".join(values) + " |")


if __name__ == "__main__":
    main()
