"""The API side of life_cost.py: one version's `scheduler serve` on a redis-server of its
own, the deployment a section measures (its nodes, its stored jobs, its schedule and drains)
and a job's life, a heartbeat and a poll over HTTP. Only the HTTP API and plain Redis commands
are used, so any version of the scheduler can be measured. Beside it, the floors served one
call per request by floor_app.py, driven the same way (HttpFloor)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from benchmarks import harness
from benchmarks.life_floor import FLOORS, Floor
from tests.processes import request_many

PREFIX = "life"
NODE = "measured-node"
OTHERS = [f"stored-node-{i}" for i in range(4)]
DRAINED = [f"drained-node-{i}" for i in range(2)]
# The request metrics' flush (a script each METRICS_FLUSH_SECS after requests came) is put
# off past the run: it would land in whichever subject's turn runs then (life_cost.py, what
# it cannot isolate).
FLUSH_SECS = 3600
LIFE_FEATURES = {
    "priority": 5,
    "cpus": 1,
    "memory_mb": 64,
    "node_selector": {"pool": "measured"},
    "max_retries": 2,
    "retry_backoff_secs": 5,
}


@dataclass
class Api:
    """One version's API and Redis, measured through HTTP."""

    name: str
    stats: redis.Redis
    url: str  # the Redis's
    base: str
    features: bool
    # The nodes a life's job may be placed on (each job's own node is polled): M alone here,
    # any of a sharded deployment's nodes in shard_cost.py.
    nodes: tuple[str, ...] = (NODE,)
    redis_name: str = field(init=False)  # a Redis of its own
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.redis_name = self.name
        self.http = httpx.Client(base_url=self.base, timeout=30.0)
        body: dict[str, Any] = {"command": "echo hi"}
        self.submit = {**body, **LIFE_FEATURES} if self.features else body

    def _ok(self, answer: httpx.Response, status: int = 200) -> Any:
        if answer.status_code != status:
            raise SystemExit(f"{self.name}: {answer.request.url.path}: {answer.status_code}")
        return answer.json()

    def lives(self, count: int) -> list[str]:
        """`count` lives, one after another: their jobs' ids."""
        made = []
        for _ in range(count):
            job = self._ok(self.http.post("/jobs", json=self.submit), 201)
            if job["node_id"] not in self.nodes:
                raise SystemExit(f"{self.name}: a life's job went to {job['node_id']!r}")
            poll = {"node_id": job["node_id"], "status": "pending"}
            found = [j["job_id"] for j in self._ok(self.http.get("/jobs", params=poll))]
            if found != [job["job_id"]]:
                raise SystemExit(f"{self.name}: the poll found {found}, not {job['job_id']}")
            path = f"/jobs/{job['job_id']}"
            self._ok(self.http.patch(path, json={"status": "running"}))
            done = {"status": "done", "exit_code": 0, "stdout": "hi\n"}
            self._ok(self.http.patch(path, json=done))
            made.append(job["job_id"])
        return made

    def heartbeats(self, count: int) -> None:
        for _ in range(count):
            self._ok(self.http.post("/nodes/heartbeat", json={"id": NODE}))

    def polls(self, count: int) -> None:
        poll = {"node_id": NODE, "status": "pending"}
        for _ in range(count):
            if self._ok(self.http.get("/jobs", params=poll)) != []:
                raise SystemExit(f"{self.name}: the idle poll found a job")


@contextlib.contextmanager
def api(code: Path, redis_url: str, prefix: str = PREFIX, **extra: str) -> Iterator[harness.Served]:
    """The API of the checkout at `code` under `prefix`, `extra` added to its environment."""
    with harness.scheduler_api(
        redis_url,
        prefix,
        code=code,
        AGENT_AUTH="open",
        # Nodes stay live without heartbeats between the phases; no worker runs anyway.
        NODE_TTL_SECS="86400",
        METRICS_FLUSH_SECS=str(FLUSH_SECS),
        **extra,
    ) as served:
        yield served


def register(http: httpx.Client, node: str, features: bool, pool: str, cpus: int) -> None:
    body: dict[str, Any] = {"id": node, "hostname": node, "cpu_count": cpus, "role": "compute"}
    if features:
        memory = min(cpus * 1024, 2**24)  # MEMORY_MB_MAX
        body |= {"memory_mb": memory, "labels": {"pool": pool, "zone": "bench"}}
    answer = http.post("/nodes/register", json=body)
    if answer.status_code != 201:
        raise SystemExit(f"register {node}: {answer.status_code} {answer.text}")


def stored_body(i: int, features: bool) -> bytes:
    """The i-th stored job: plain; with the features a quarter delayed a day, a quarter
    asking resources, a priority, a retry policy and the other nodes' pool."""
    job: dict[str, Any] = {"command": f"echo stored {i}"}
    if features and i % 4 == 1:
        job["delay_secs"] = 86400
    elif features and i % 4 == 2:
        job |= {**LIFE_FEATURES, "priority": i % 7 - 3, "node_selector": {"pool": "stored"}}
    return json.dumps(job).encode()


def prepare(base: str, stored: int, features: bool) -> None:
    """The nodes, the stored jobs (on the other nodes), the schedule and drains; then M."""
    with httpx.Client(base_url=base, timeout=30.0) as http:
        # Room for every stored job that asks (NODE_CPUS_MAX is 65 536).
        for node in OTHERS:
            register(http, node, features, "stored", 65_536)
        if features:
            for node in DRAINED:
                register(http, node, features, "stored", 64)
                if http.post(f"/nodes/{node}/drain", json={}).status_code != 200:
                    raise SystemExit(f"drain {node} refused")
            template = {"command": "echo tick", "node_selector": {"pool": "stored"}}
            schedule = {"name": "hourly", "every_secs": 3600, "job": template}
            if http.post("/schedules", json=schedule).status_code != 201:
                raise SystemExit("the schedule was refused")
        reqs = [("POST", "/jobs", stored_body(i, features)) for i in range(stored)]
        answers = asyncio.run(request_many([base], reqs, 32))
        wrong = sorted({status for status, _ in answers if status != 201})
        if wrong:
            raise SystemExit(f"storing: answers {wrong}")
        register(http, NODE, features, "measured", 4)
        if http.get("/jobs", params={"node_id": NODE, "status": "pending"}).json() != []:
            raise SystemExit("the measured node has jobs before the first life")


@contextlib.contextmanager
def deployment(code: Path, name: str, stored: int, features: bool) -> Iterator[Api]:
    with (
        harness.redis_server() as url,
        harness.connected(url) as client,
        api(code, url) as served,
    ):
        prepare(served.url, stored, features)
        subject = Api(name, client, url, served.url, features)
        yield subject
        subject.http.close()


@dataclass
class HttpFloor:
    """A floor served by floor_app.py, driven as Api drives the API: one keep-alive client,
    one request at a time, the same four requests a life (the PATCHes naming the job's node,
    which the floor's scripts take as an argument), a heartbeat and a poll of the floor's
    node with no queue."""

    name: str
    stats: redis.Redis
    redis_name: str
    base: str  # the app's, with the floor's path prefix
    floor: Floor  # its nodes' names
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base, timeout=30.0)

    def _ok(self, answer: httpx.Response, status: int = 200) -> Any:
        if answer.status_code != status:
            raise SystemExit(f"{self.name}: {answer.request.url.path}: {answer.status_code}")
        return answer.json()

    def lives(self, count: int) -> None:
        for _ in range(count):
            job = self._ok(self.http.post("/jobs", json={"command": "echo hi"}), 201)
            poll = {"node_id": job["node_id"], "status": "pending"}
            found = [j["job_id"] for j in self._ok(self.http.get("/jobs", params=poll))]
            if found != [job["job_id"]]:
                raise SystemExit(f"{self.name}: the poll found {found}, not {job['job_id']}")
            path = f"/jobs/{job['job_id']}"
            self._ok(self.http.patch(path, json={"status": "running", "node_id": job["node_id"]}))
            done = {"status": "done", "exit_code": 0, "stdout": "hi\n", "node_id": job["node_id"]}
            self._ok(self.http.patch(path, json=done))

    def heartbeats(self, count: int) -> None:
        for _ in range(count):
            self._ok(self.http.post("/nodes/heartbeat", json={"id": self.floor.node}))

    def polls(self, count: int) -> None:
        poll = {"node_id": self.floor.idle_node, "status": "pending"}
        for _ in range(count):
            if self._ok(self.http.get("/jobs", params=poll)) != []:
                raise SystemExit(f"{self.name}: the idle poll found a job")


@contextlib.contextmanager
def http_floors(redis_url: str, stats: redis.Redis, redis_name: str) -> Iterator[list[HttpFloor]]:
    """floor_app.py on `redis_url` (uvicorn, one worker, its defaults: uvloop and httptools as
    far as installed), and a subject of each of its floors ("floor http", "featured http")."""
    port = harness.free_port()
    cmd = harness.uvicorn_cmd("benchmarks.floor_app:app", port, "--workers", "1")
    env = {**os.environ, "FLOOR_REDIS_URL": redis_url}
    subjects: list[HttpFloor] = []
    with harness.served(cmd, port, env) as app:
        try:
            subjects = [
                HttpFloor(f"{name} http", stats, redis_name, f"{app.url}/{name}", kind())
                for name, kind in FLOORS.items()
            ]
            yield subjects
        finally:
            for subject in subjects:
                subject.http.close()
