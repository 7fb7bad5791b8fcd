#!/usr/bin/env python3
"""Where the event loops' CPU goes, by part of the request path, from `perf script` output of a
profile with DWARF call graphs (bench/run_profile.sh with PERF=dwarf). Each sample of a thread
whose name starts with `loop` is put in the first part, in the order below, that any frame of
its stack names; a recv is told apart by where it started: Asio's speculative read (from
`start_op`, right after an answer, which finds nothing on a kept-alive connection whose client
waits for that answer) or the reactor's (the request is there).

    perf script -i perf.data -F comm,ip,sym | bench/loop_breakdown.py
"""
import collections
import sys

PARTS = [
    ("the answer's send (sendmsg; on loopback it runs the client's side of TCP too)",
     ["__libc_sendmsg", "__sys_sendmsg"]),
    ("recv that finds nothing (Asio's speculative read after an answer)", "speculative"),
    ("recv with the request (from the reactor)", "reactor"),
    ("epoll_wait", ["epoll_wait"]),
    ("the model (TorchScript forward, run inline)", ["RunInline", "torch::jit", "at::native"]),
    ("decode the request (JSON to tensors)", ["Decode"]),
    ("audit record (on the loop; the writer thread is apart)", ["AuditLog::Record"]),
    ("authenticate, authorize, route", ["Authenticate", "AuthorizeStage", "RouteStage"]),
    ("access log line (on the loop)", ["AccessLog::Write"]),
    ("metrics (ObserveStage)", ["ObserveStage"]),
    ("encode the answer", ["Encode"]),
]
REST = "the rest (HTTP parsing and heads, Asio's scheduling, handlers, allocation)"


def part_of(frames):
    joined = " ".join(frames)
    recv = next((i for i, f in enumerate(frames)
                 if "__libc_recv" in f or "non_blocking_recv" in f), None)
    for name, keys in PARTS:
        if isinstance(keys, str):
            if recv is not None and ("start_op" in " ".join(frames[recv:])) == (keys == "speculative"):
                return name
            continue
        if any(k in joined for k in keys):
            return name
    return REST


def main():
    counts = collections.Counter()
    total = 0
    for block in sys.stdin.read().split("\n\n"):
        lines = [l.strip() for l in block.strip().split("\n") if l.strip()]
        if len(lines) < 2 or not lines[0].split()[0].startswith("loop"):
            continue
        frames = [l.split(" ", 1)[1] if " " in l else l for l in lines[1:]]
        counts[part_of(frames)] += 1
        total += 1
    if total == 0:
        print("no samples of the loops' threads")
        return
    print(f"{total} samples of the event loops")
    for name in [p[0] for p in PARTS] + [REST]:
        print(f"  {100 * counts[name] / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
