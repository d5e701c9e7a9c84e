"""The floors of life_floor.py over HTTP, at the API's pace (life_cost.py's "floor http" and
"featured http"): a minimal Starlette app, one call of a floor's script per request, by
EVALSHA over one redis.asyncio connection, the scripts loaded at startup. Each floor under
its own path prefix, /floor/... and /featured/..., keys under its hash tag with `:http`
after it (apart from the tight floors'):

    POST  /{floor}/jobs                    create: {"job_id", "node_id"}, 201
    GET   /{floor}/jobs?node_id=N          poll N's queue: [] or [{"job_id", "node_id"}]
    PATCH /{floor}/jobs/{id}               {"status": "running" | "done", "node_id": N}
    POST  /{floor}/nodes/heartbeat         {"id": N}
    GET   /health

    FLOOR_REDIS_URL=redis://... python -m uvicorn benchmarks.floor_app:app

It answers as little as the floor's calls tell it, and its Python is far less than the API's
per request, so Redis sits idle less between calls than it does between the API's: the pace
of "floor over HTTP" is the API's request by request, a little faster.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from benchmarks.life_floor import FLOORS, Floor

HTTP_SUFFIX = ":http"


@dataclass
class Served:
    """One floor's scripts on the app's connection."""

    client: aioredis.Redis
    floor: Floor
    sha: dict[str, str]

    async def call(self, name: str, *args: Any) -> Any:
        return await self.client.evalsha(self.sha[name], 1, self.floor.root, *args)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    client = aioredis.Redis.from_url(os.environ["FLOOR_REDIS_URL"], single_connection_client=True)
    served = {}
    for prefix, kind in FLOORS.items():
        floor = kind(HTTP_SUFFIX)
        sha = {name: await client.script_load(text) for name, text in floor.SCRIPTS.items()}
        served[prefix] = Served(client, floor, sha)
        await served[prefix].call("setup", *floor.setup_args())
    app.state.floors = served
    yield
    await client.aclose()


def served(request: Request) -> Served:
    return request.app.state.floors[request.path_params["floor"]]  # type: ignore[no-any-return]


def answer(body: Any, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status)


async def create(request: Request) -> Response:
    json.loads(await request.body())  # the job asked, read as the API reads it
    it = served(request)
    job_id, node = it.floor.created(await it.call("create", *it.floor.create_args(time.time())))
    return answer({"job_id": job_id, "node_id": node}, 201)


async def poll(request: Request) -> Response:
    it, node = served(request), request.query_params["node_id"]
    found = it.floor.found(await it.call("poll", *it.floor.poll_args(node)))
    return answer([] if found is None else [{"job_id": found, "node_id": node}])


async def update(request: Request) -> Response:
    body, it = json.loads(await request.body()), served(request)
    job_id, node, now = request.path_params["job_id"], body["node_id"], time.time()
    args = {"running": it.floor.running_args, "done": it.floor.done_args}[body["status"]]
    if not await it.call(body["status"], *args(job_id, node, now)):
        return answer({"detail": "no such job"}, 404)
    return answer({"job_id": job_id, "status": body["status"]})


async def heartbeat(request: Request) -> Response:
    node, it = json.loads(await request.body())["id"], served(request)
    if not await it.call("heartbeat", *it.floor.heartbeat_args(node, time.time())):
        return answer({"detail": "no such node"}, 404)
    return answer({"id": node})


async def health(request: Request) -> Response:
    return answer({"status": "ok"})


app = Starlette(
    routes=[
        Route("/health", health),
        Route("/{floor}/jobs", create, methods=["POST"]),
        Route("/{floor}/jobs", poll, methods=["GET"]),
        Route("/{floor}/jobs/{job_id}", update, methods=["PATCH"]),
        Route("/{floor}/nodes/heartbeat", heartbeat, methods=["POST"]),
    ],
    lifespan=lifespan,
)
