"""Where the nodes come from: the tiny-aws registry over HTTP, or the scheduler's own.

Either way the answer is a `Placement` for the create script. Errors carry the original's
texts (CONTRACT 2.6); the API turns them into 503s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import httpx
import msgspec

from scheduler.config import Settings
from scheduler.models.registry import Instance, NodeStatus
from scheduler.nodes.placement import NoHealthyNodes, Placement, healthy_compute_nodes

T = TypeVar("T")


class RegistryError(Exception):
    """Node selection failed; str() is the text of the 503."""


class NodeSource(Protocol):
    async def placement(self, instance_id: str) -> Placement: ...

    async def aclose(self) -> None: ...


class BuiltinRegistry:
    """The scheduler is the registry: the create script reads live nodes from Redis itself.
    It has no instances (GET /instances answers []), so an instance-bound job cannot be placed."""

    async def placement(self, instance_id: str) -> Placement:
        if instance_id:
            raise RegistryError("instance not found")
        return Placement.live()

    async def aclose(self) -> None:
        return None


class TTLCache(Generic[T]):
    """Per-process cache with single flight: concurrent misses on one key load it once.
    Failures are not cached. ttl <= 0 disables it."""

    MAX_ENTRIES = 10_000

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: dict[str, tuple[float, T]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _fresh(self, key: str) -> tuple[bool, T | None]:
        hit = self._entries.get(key)
        if hit is not None and self.clock() < hit[0]:
            return True, hit[1]
        return False, None

    async def get(self, key: str, load: Callable[[], Awaitable[T]]) -> T:
        if self.ttl <= 0:
            return await load()
        fresh, value = self._fresh(key)
        if fresh:
            return value  # type: ignore[return-value]
        if len(self._locks) >= self.MAX_ENTRIES:
            # Failed loads leave no entry, so the success path's reset below never sees them.
            # Dropping an idle lock costs at most one extra concurrent load.
            self._locks = {k: lock for k, lock in self._locks.items() if lock.locked()}
        async with self._locks.setdefault(key, asyncio.Lock()):
            fresh, value = self._fresh(key)
            if fresh:
                return value  # type: ignore[return-value]
            loaded = await load()
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
                self._locks = {key: self._locks[key]}
            self._entries[key] = (self.clock() + self.ttl, loaded)
            return loaded

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)


_nodes_decoder = msgspec.json.Decoder(dict[str, NodeStatus])


def _decode_nodes(content: bytes) -> dict[str, NodeStatus]:
    try:
        return _nodes_decoder.decode(content)
    except msgspec.DecodeError:
        raise RegistryError("failed to decode registry response") from None


_instance_decoder = msgspec.json.Decoder(Instance)


class RemoteRegistry:
    """Client of the tiny-aws registry (GET /nodes?role=compute, GET /instances/{id})."""

    def __init__(
        self,
        url: str,
        api_key: str = "",
        timeout: float = 3.0,
        cache_secs: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self._nodes: TTLCache[dict[str, NodeStatus]] = TTLCache(cache_secs)
        self._instances: TTLCache[Instance] = TTLCache(cache_secs)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str) -> httpx.Response:
        try:
            return await self._http.get(path)
        except httpx.RequestError:
            raise RegistryError("failed to reach registry") from None

    async def _load_nodes(self) -> dict[str, NodeStatus]:
        # Like the original, the status code is not checked: a body that is not the
        # node map (a 401 text, an array) is a decode error.
        return _decode_nodes((await self._get("/nodes?role=compute")).content)

    async def read_compute_nodes(self) -> dict[str, NodeStatus]:
        """The node map, uncached, for the sweep's lost-node check. Unlike placement, an error
        status is an error here: an error page that decodes as {} must not read as "no node
        is healthy"."""
        response = await self._get("/nodes?role=compute")
        if response.status_code != 200:
            raise RegistryError(f"registry answered {response.status_code}")
        return _decode_nodes(response.content)

    async def compute_nodes(self) -> dict[str, NodeStatus]:
        return await self._nodes.get("compute", self._load_nodes)

    async def _load_instance(self, instance_id: str) -> Instance:
        response = await self._get(f"/instances/{instance_id}")
        if response.status_code == 404:
            raise RegistryError("instance not found")
        if response.status_code >= 400:
            raise RegistryError(f"registry error: {response.text.strip()}")
        try:
            return _instance_decoder.decode(response.content)
        except msgspec.DecodeError:
            raise RegistryError("failed to decode instance") from None

    async def instance(self, instance_id: str) -> Instance:
        inst = await self._instances.get(instance_id, lambda: self._load_instance(instance_id))
        if inst.status != "running":
            # Only a usable answer is worth caching: an instance still provisioning may be
            # running a moment later.
            self._instances.forget(instance_id)
        return inst

    async def placement(self, instance_id: str) -> Placement:
        if not instance_id:
            healthy = healthy_compute_nodes(await self.compute_nodes())
            if not healthy:
                raise NoHealthyNodes()
            return Placement.among(healthy)
        inst = await self.instance(instance_id)
        if inst.status != "running":
            raise RegistryError(f"instance {instance_id} not running (status={inst.status})")
        node = (await self.compute_nodes()).get(inst.node_id)
        if node is None or node.status != "healthy":
            raise RegistryError(f"node {inst.node_id} for instance {instance_id} is not healthy")
        return Placement.fixed(inst.node_id)


def node_source(settings: Settings) -> NodeSource:
    if settings.builtin_registry:
        return BuiltinRegistry()
    return RemoteRegistry(
        settings.registry_url,
        api_key=settings.api_key,
        timeout=settings.registry_timeout_secs,
        cache_secs=settings.registry_cache_secs,
    )
