"""N idle agents long-polling one API: `python -m benchmarks.idle_pollers URL N WAIT`.

Each holds one keep-alive connection and repeats `GET /jobs?node_id=idle-<i>&status=pending
&wait=WAIT` (nodes without work, so every poll runs its wait out). Prints "ready" once every
connection has sent its first poll, then runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlparse


async def poller(host: str, port: int, index: int, wait: str, ready: asyncio.Queue[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"GET /jobs?node_id=idle-{index}&status=pending&wait={wait} HTTP/1.1\r\n"
        f"Host: {host}\r\n\r\n"
    ).encode()
    first = True
    while True:
        writer.write(request)
        await writer.drain()
        if first:
            ready.put_nowait(index)
            first = False
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)


async def hold(url: str, count: int, wait: str) -> None:
    parsed = urlparse(url)
    ready: asyncio.Queue[int] = asyncio.Queue()
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    tasks = [asyncio.create_task(poller(host, port, i, wait, ready)) for i in range(count)]
    for _ in range(count):
        await ready.get()
    print("ready", flush=True)
    await asyncio.gather(*tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the API's base URL")
    parser.add_argument("count", type=int, help="idle agents")
    parser.add_argument("wait", help="each poll's wait, in seconds")
    args = parser.parse_args()
    asyncio.run(hold(args.url, args.count, args.wait))


if __name__ == "__main__":
    main()
