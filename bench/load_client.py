#!/usr/bin/env python3
"""A load client that records when each request failed, for the resilience benchmarks.

Each thread keeps one HTTP/1.1 connection (reopened after an error) and sends the same inference
request in a loop, closed-loop, or at --rate requests per second (open-loop, per thread).
At --at seconds it sends --signal to --pid (a replica dying or stopping mid-load), and at
--resume-at it sends SIGCONT. With --obey-retry-after, a 503 that carries Retry-After is sent
again once, after the time it asked for, and the outcome of that second try is counted.

Prints one JSON object: requests sent, answered 200, failed (anything else, or no answer within
--timeout-ms), the time of the first and last failure after the signal (the error window),
latency quantiles of the 200s, and what happened to refusals.
Usage: load_client.py URL KEY BODY_FILE [options]
"""
import argparse
import http.client
import json
import os
import signal
import threading
import time
import urllib.parse


def quantile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


class Worker(threading.Thread):
    def __init__(self, args, body, begin, stop):
        super().__init__(daemon=True)
        self.args, self.body, self.begin, self.stop = args, body, begin, stop
        url = urllib.parse.urlparse(args.url)
        self.host, self.port, self.path = url.hostname, url.port, url.path
        self.connection = None
        self.results = []  # (sent at, seconds, status, retry-after)
        self.retried = []  # status of the second try after a Retry-After
        self.samples = []  # the first failures, as text

    def send(self):
        headers = {"Authorization": "Bearer " + self.args.key,
                   "Content-Type": "application/json"}
        if self.args.deadline_ms:
            headers["X-Pillar-Timeout-Ms"] = str(self.args.deadline_ms)
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.args.timeout_ms / 1000)
            self.connection.request("POST", self.path, self.body, headers)
            response = self.connection.getresponse()
            body = response.read()
            retry_after = response.getheader("Retry-After")
            if response.status != 200 and len(self.samples) < 3:
                self.samples.append("%d %s" % (response.status, body[:200].decode("utf-8", "replace")))
            if response.getheader("Connection", "").lower() == "close":
                self.connection.close()
                self.connection = None
            return response.status, retry_after
        except (OSError, http.client.HTTPException) as error:
            if len(self.samples) < 3:
                self.samples.append("no answer: %s" % error)
            if self.connection is not None:
                self.connection.close()
            self.connection = None
            return 0, None

    def run(self):
        interval = 1.0 / self.args.rate if self.args.rate else 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            if interval:
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                next_at += interval
            sent = time.monotonic()
            status, retry_after = self.send()
            elapsed = time.monotonic() - sent
            self.results.append((sent - self.begin, elapsed, status, retry_after))
            if self.args.obey_retry_after and status == 503 and retry_after:
                time.sleep(float(retry_after))
                self.retried.append(self.send()[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("key")
    p.add_argument("body_file")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--timeout-ms", type=int, default=2000)
    p.add_argument("--deadline-ms", type=int, default=0)
    p.add_argument("--pid", type=int, default=0)
    p.add_argument("--signal", default="")
    p.add_argument("--at", type=float, default=0)
    p.add_argument("--resume-at", type=float, default=0)
    p.add_argument("--obey-retry-after", action="store_true")
    args = p.parse_args()
    body = open(args.body_file, "rb").read()
    begin = time.monotonic()
    stop = threading.Event()
    workers = [Worker(args, body, begin, stop) for _ in range(args.threads)]
    for w in workers:
        w.start()
    if args.signal and args.pid:
        time.sleep(max(0, args.at - (time.monotonic() - begin)))
        os.kill(args.pid, getattr(signal, args.signal))
        if args.resume_at:
            time.sleep(max(0, args.resume_at - (time.monotonic() - begin)))
            os.kill(args.pid, signal.SIGCONT)
    time.sleep(max(0, args.seconds - (time.monotonic() - begin)))
    stop.set()
    for w in workers:
        w.join()
    results = [r for w in workers for r in w.results]
    failures = [r for r in results if r[2] != 200 and r[2] != 503]
    refused = [r for r in results if r[2] == 503]
    after = [r[0] for r in results if r[2] != 200 and r[0] >= args.at]
    retried = [s for w in workers for s in w.retried]
    print(json.dumps({
        "sent": len(results),
        "ok": sum(1 for r in results if r[2] == 200),
        "failed": len(failures) + len(refused) if not args.obey_retry_after else len(failures),
        "refused": len(refused),
        "refused_with_retry_after": sum(1 for r in refused if r[3]),
        "refused_p50_ms": (quantile([r[1] for r in refused], 0.5) or 0) * 1e3,
        "refused_p99_ms": (quantile([r[1] for r in refused], 0.99) or 0) * 1e3,
        "window_s": (max(after) - min(after)) if after else 0.0,
        "first_failure_s": min(after) if after else None,
        "ok_p50_ms": (quantile([r[1] for r in results if r[2] == 200], 0.5) or 0) * 1e3,
        "ok_p99_ms": (quantile([r[1] for r in results if r[2] == 200], 0.99) or 0) * 1e3,
        "retried": len(retried),
        "retried_ok": sum(1 for s in retried if s == 200),
        "retried_statuses": {str(k): retried.count(k) for k in set(retried)},
        "statuses": {str(k): sum(1 for r in results if r[2] == k) for k in set(r[2] for r in results)},
        "failure_samples": [s for w in workers for s in w.samples][:5],
    }))


if __name__ == "__main__":
    main()
