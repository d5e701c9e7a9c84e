"""Where the nodes come from: the tiny-aws registry over HTTP, or the scheduler's own.

Either way a source answers a `Placement` for the create script, and the node map of GET
/nodes in one shape. Errors carry the original's texts (CONTRACT 2.6); the API turns them into
503s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import httpx
import msgspec

from scheduler.config import Settings
from scheduler.models.registry import Instance, Node, NodeStatus
from scheduler.models.wire import InvalidInput
from scheduler.nodes.placement import NoHealthyNodes, Placement, healthy_compute_nodes

T = TypeVar("T")
# The built-in registry's nodes at a time (ops.nodes.nodes), as GET /nodes lists them.
NodeReader = Callable[[float], Awaitable[dict[str, Node]]]


class RegistryError(Exception):
    """Node selection failed; str() is the text of the 503."""


class NodeSource(Protocol):
    async def placement(self, instance_id: str, fit: bool = False) -> Placement:
        """Where a job may go; `fit`: it asks resources or labels (models.job.asks_fit)."""
        ...

    async def nodes(self, role: str) -> dict[str, Node]:
        """GET /nodes: the nodes by id, only those of `role` unless it is empty."""
        ...

    async def aclose(self) -> None: ...


def with_role(nodes: Mapping[str, Node], role: str) -> dict[str, Node]:
    """The nodes of `role` (an exact match, as the original registry's ?role=); all for ""."""
    return {node_id: node for node_id, node in nodes.items() if not role or node.role == role}


class BuiltinRegistry:
    """The scheduler is the registry: the create script reads live nodes from Redis itself.
    It has no instances (GET /instances answers []), so an instance-bound job cannot be placed."""

    def __init__(self, read_nodes: NodeReader | None = None) -> None:
        # None: a source that only places jobs (the SQS ingestion's); the API passes its store's.
        self._read_nodes = read_nodes

    async def placement(self, instance_id: str, fit: bool = False) -> Placement:
        if instance_id:
            raise RegistryError("instance not found")
        return Placement.live()

    async def nodes(self, role: str) -> dict[str, Node]:
        if self._read_nodes is None:
            raise RuntimeError("this node source was made without a node reader")
        return with_role(await self._read_nodes(time.time()), role)

    async def aclose(self) -> None:
        return None


class TTLCache(Generic[T]):
    """Per-process cache with single flight: concurrent misses on one key load it once.
    Failures are not cached. ttl <= 0 disables it. An entry is as old as its load's start:
    nothing is served that was asked for more than `ttl` ago (`scheduler up` counts on it)."""

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
            started = self.clock()
            loaded = await load()
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
                self._locks = {key: self._locks[key]}
            self._entries[key] = (started + self.ttl, loaded)
            return loaded

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)


_nodes_decoder = msgspec.json.Decoder(dict[str, NodeStatus])
# GET /nodes passes on a registry node as the built-in registry's `Node`: these fields only, so
# whatever else a registry puts in its nodes (a token, a key) goes no further.
_listing_decoder = msgspec.json.Decoder(dict[str, Node])


def _decode_nodes(content: bytes) -> dict[str, NodeStatus]:
    try:
        return _nodes_decoder.decode(content)
    except msgspec.DecodeError:
        raise RegistryError("failed to decode registry response") from None


@dataclass(frozen=True, slots=True)
class NodeMap:
    """One answer of the registry's GET /nodes: its status and body, and the body read as
    placement reads it (a body that does not decode so is an error, and is not cached)."""

    status_code: int
    content: bytes
    statuses: dict[str, NodeStatus]


# The two node maps asked of the registry, by cache key: the compute nodes (placement's, and
# GET /nodes?role=compute's) and all of them (GET /nodes, other roles filtered here). No
# client text goes into the registry's URL.
_NODE_PATHS = {"compute": "/nodes?role=compute", "": "/nodes"}


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
        self._nodes: TTLCache[NodeMap] = TTLCache(cache_secs)
        self._instances: TTLCache[Instance] = TTLCache(cache_secs)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str) -> httpx.Response:
        try:
            return await self._http.get(path)
        except httpx.RequestError:
            raise RegistryError("failed to reach registry") from None

    async def _load_nodes(self, key: str) -> NodeMap:
        # Like the original, placement does not check the status code: a body that is not
        # the node map (a 401 text, an array) is a decode error. The listing checks it.
        response = await self._get(_NODE_PATHS[key])
        return NodeMap(response.status_code, response.content, _decode_nodes(response.content))

    async def _node_map(self, key: str) -> NodeMap:
        return await self._nodes.get(key, lambda: self._load_nodes(key))

    async def read_compute_nodes(self) -> dict[str, NodeStatus]:
        """The node map, uncached, for the sweep's lost-node check. Unlike placement, an error
        status is an error here: an error page that decodes as {} must not read as "no node
        is healthy"."""
        response = await self._get("/nodes?role=compute")
        if response.status_code != 200:
            raise RegistryError(f"registry answered {response.status_code}")
        return _decode_nodes(response.content)

    async def compute_nodes(self) -> dict[str, NodeStatus]:
        return (await self._node_map("compute")).statuses

    async def nodes(self, role: str) -> dict[str, Node]:
        """GET /nodes with an external registry: its nodes in the built-in registry's shape.
        The compute nodes are placement's own read (one cache entry), so what this lists as
        healthy is what a submission is placed on; `scheduler up` waits for it."""
        try:
            answer = await self._node_map("compute" if role == "compute" else "")
            if answer.status_code != 200:
                # An error page that decodes ({} from a 500) must not read as "no nodes".
                raise RegistryError(f"registry answered {answer.status_code}")
            try:
                listed = _listing_decoder.decode(answer.content)
            except msgspec.DecodeError:
                raise RegistryError("failed to decode registry response") from None
        except RegistryError as exc:
            # Named by its setting only: the URL may carry credentials.
            text = f"cannot list the nodes of the registry at REGISTRY_URL: {exc}"
            raise RegistryError(text) from None
        return with_role(listed, role)

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

    async def placement(self, instance_id: str, fit: bool = False) -> Placement:
        if fit:  # its nodes carry neither labels nor room (docs/GUIDE.md, Placement)
            raise InvalidInput(
                "invalid node_selector: cpus, memory_mb and node_selector need the built-in "
                "registry (REGISTRY_URL unset)"
            )
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


def node_source(settings: Settings, read_nodes: NodeReader | None = None) -> NodeSource:
    if settings.builtin_registry:
        return BuiltinRegistry(read_nodes)
    return RemoteRegistry(
        settings.registry_url,
        api_key=settings.api_key,
        timeout=settings.registry_timeout_secs,
        cache_secs=settings.registry_cache_secs,
    )
