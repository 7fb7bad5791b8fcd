#!/usr/bin/env python3
"""A TCP relay that holds each chunk it reads for DELAY seconds before writing it on: a Redis
(or any server) that seems to be on another host. Python's own cost adds about 100 us a chunk,
so the delay is a floor, not a figure; for trying what a change does when round trips are long.

    bench/delay_relay.py LISTEN_PORT TARGET_PORT DELAY_SECONDS
"""
import asyncio
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            loop.call_later(delay, writer.write, data)
    finally:
        await asyncio.sleep(delay)  # what was held goes out before the close
        writer.close()


async def main(listen, target, delay):
    async def handle(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(client_reader, server_writer, delay),
                             pipe(server_reader, client_writer, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
