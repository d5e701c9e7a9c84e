"""What many nodes cost a `/metrics` scrape and the web UI's nodes page: the answer's bytes, and
the Redis time of the commands it sends (the longest one, which holds every other client
back, and their sum), with N nodes registered in open mode, 16 labels each, some holding jobs.

    .venv/bin/python -m benchmarks.nodes_scrape_cost [--nodes 3000 10000] [--jobs 200]
        [--scrapes 5] [--before DIR]

Starts its own redis-server and, per node count, the API of this checkout (and with
`--before DIR`, of the checkout in DIR too, e.g. `git worktree add /tmp/before HEAD~3`: side
by side in one run, each on its own prefix of the same Redis) under uvicorn on a free port.
Registers the nodes over HTTP (POST /nodes/register), submits `--jobs` jobs, then scrapes.
Per page: its bytes, the scripts it runs (INFO commandstats), the CPU time of Redis' main
thread it costs (INFO cpu), and its longest script (SLOWLOG: FCALL, the commands inside it
included; under 20 µs shows as 0), each script taken at its shortest over `--scrapes`
scrapes so that a pause of a shared machine does not count; the rest are medians. Redis is
single-threaded: a script's time is time no other client is served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import httpx
import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import median

LABELS = {f"label-{i:02d}": f"value-{i:02d}-of-a-node" for i in range(16)}


async def populate(url: str, nodes: int, jobs: int) -> None:
    """`nodes` nodes with 16 labels each (open mode: no credentials), then `jobs` jobs, which
    placement spreads over them."""
    limit = asyncio.Semaphore(32)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def register(i: int) -> None:
            body = {"id": f"node-{i:05d}", "hostname": f"host-{i:05d}", "cpu_count": 8}
            async with limit:
                answer = await http.post("/nodes/register", json={**body, "labels": LABELS})
            answer.raise_for_status()

        await asyncio.gather(*(register(i) for i in range(nodes)))
        for _ in range(jobs):
            (await http.post("/jobs", json={"command": "sleep 1"})).raise_for_status()


SLOW_US = 20  # SLOWLOG logs what takes this long: scripts worth timing, few of their commands


def cpu_us(client: redis.Redis) -> float:
    """CPU time of Redis' main thread so far, in µs (wall time would count the time the
    machine ran something else)."""
    info = client.info("cpu")
    return (info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"]) * 1e6


def scrape(client: redis.Redis, url: str, path: str) -> tuple[int, int, float, dict[str, int]]:
    """One GET of `path`: its bytes, the scripts it ran (every Redis call of these pages is
    one: FCALL), Redis' CPU time (µs) and each script's time by its command (SLOWLOG, which
    also logs a slow command inside a script, within the script's own time: left out)."""
    client.config_resetstat()
    client.slowlog_reset()
    before = cpu_us(client)
    body = httpx.get(url + path, timeout=60).content
    cpu = cpu_us(client) - before
    calls = client.info("commandstats").get("cmdstat_fcall", {"calls": 0})["calls"]
    entries = client.slowlog_get(100_000)
    scripts = {
        bytes(e["command"]).decode(errors="replace"): int(e["duration"])
        for e in entries
        if bytes(e["command"]).upper().startswith(b"FCALL")
    }
    return len(body), int(calls), cpu, scripts


def measure(client: redis.Redis, url: str, path: str, scrapes: int) -> tuple[float, ...]:
    """Median bytes, scripts and CPU of `scrapes` scrapes, and the longest script: each
    script's shortest run over the scrapes (the same call each time: a run the machine
    paused counts only if every run was paused), the longest of those."""
    runs = [scrape(client, url, path) for _ in range(scrapes)]
    best: dict[str, int] = {}
    for *_, scripts in runs:
        for command, duration in scripts.items():
            best[command] = min(best.get(command, duration), duration)
    medians = [median(run[i] for run in runs) for i in range(3)]
    return (*medians, max(best.values(), default=0))


TABLE = Table(
    Column("size", "9.1f", "KiB"),
    Column("scripts", "4.0f", "scripts"),
    Column("longest", "7.2f", "ms longest"),
    Column("Redis CPU", "7.2f", "ms Redis CPU"),
    label_width=19,
)


def row(label: str, path: str, figures: tuple[float, ...]) -> None:
    size, scripts, cpu, longest = figures
    TABLE.row(f"{label:8s} {path}", size / 1024, scripts, longest / 1000, cpu / 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[3000, 10000])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout to measure beside this")
    args = parser.parse_args()
    checkouts = [("this", harness.ROOT)]
    checkouts += [("before", args.before.resolve())] if args.before else []
    with harness.redis_server() as redis_url, harness.connected(redis_url) as client:
        client.config_set("slowlog-log-slower-than", SLOW_US)
        client.config_set("slowlog-max-len", 100_000)
        for count in args.nodes:
            print(f"{count} nodes, 16 labels each, {args.jobs} jobs")
            for label, checkout in checkouts:
                with harness.uvicorn_api(
                    redis_url,
                    f"scrape-{label}-{count}",
                    code=checkout,
                    NODE_TTL_SECS="36000",
                    MAX_NODES="100000",
                ) as api:
                    asyncio.run(populate(api.url, count, args.jobs))
                    for path in ("/metrics", "/ui/nodes"):
                        row(label, path, measure(client, api.url, path, args.scrapes))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
