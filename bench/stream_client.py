#!/usr/bin/python3
"""Streams OpenAI-compatible chat completions at a fixed concurrency and measures them.

Usage: stream_client.py PORT KEY CONCURRENCY SECONDS [MODEL]
Each of CONCURRENCY connections (kept alive) asks for a streamed chat completion, reads its
server-sent events to [DONE], and asks again, for SECONDS. Prints one JSON object: streams
finished, events (chunks) read, events per second, time to first event (from sending the request
to reading the first "data:" line) p50/p90/p99 in ms, and failures.

Events per second are the events read within the SECONDS, over SECONDS. (They were all the events,
over the time until the last stream begun in the window ended: streams of one length started
together stay in step, so that time was the window plus either almost nothing or almost a whole
stream, and the rate of two servers doing the same work differed by the 5 % that step made.)
"""
import asyncio
import json
import sys
import time

PORT, KEY, CONCURRENCY, SECONDS = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
MODEL = sys.argv[5] if len(sys.argv) > 5 else "chat"
BODY = json.dumps({"model": MODEL, "stream": True,
                   "messages": [{"role": "user", "content": "Tell me about pillar."}]}).encode()
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
           b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " +
           str(len(BODY)).encode() + b"\r\n\r\n" + BODY)


async def one_stream(reader, writer, ttfts, deadline, stats):
    start = time.perf_counter()
    writer.write(REQUEST)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode())
    events = 0
    first = None
    done = False
    chunked = b"transfer-encoding: chunked" in head.lower()
    if not chunked:
        raise RuntimeError("not chunked")
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            break
        n = data.count(b"data: ")
        if n and first is None:
            first = time.perf_counter()
        events += n
        if n and time.perf_counter() <= deadline:
            stats["window_events"] += n
        if b"data: [DONE]" in data:
            done = True
    if not done:
        raise RuntimeError("no [DONE]")
    ttfts.append((first - start) * 1e3)
    return events


async def worker(deadline, stats, ttfts):
    reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
    while time.perf_counter() < deadline:
        try:
            # Awaited first: `stats["events"] += await ...` would read the total before the
            # await and lose what other streams added meanwhile.
            events = await one_stream(reader, writer, ttfts, deadline, stats)
            stats["events"] += events
            stats["streams"] += 1
        except Exception as e:  # a failed stream: counted, and a new connection
            stats["failures"] += 1
            stats["last_error"] = str(e)[:200]
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
    writer.close()


async def main():
    stats = {"streams": 0, "events": 0, "window_events": 0, "failures": 0}
    ttfts = []
    start = time.perf_counter()
    deadline = start + SECONDS
    await asyncio.gather(*(worker(deadline, stats, ttfts) for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - start
    ttfts.sort()
    q = lambda p: round(ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))], 3) if ttfts else None
    stats.update(events_per_s=round(stats["window_events"] / SECONDS, 1), seconds=round(elapsed, 2),
                 ttft_p50_ms=q(0.5), ttft_p90_ms=q(0.9), ttft_p99_ms=q(0.99))
    print(json.dumps(stats))


asyncio.run(main())
