"""The built-in registry's services (REGISTRY_URL unset): each on its node's shard."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.models.registry import Service
from scheduler.store.errors import ServiceNotFound
from scheduler.store.merging import merged_services
from scheduler.store.operation import (
    Each,
    OfNode,
    Route,
    Shard,
    Steps,
    by_service,
    operation,
    run,
    send,
)
from scheduler.store.scripts import services as service_scripts
from scheduler.store.scripts.services import SERVICE_ID_PREFIX

# Services the built-in registry keeps (each a few hundred bytes): a node's oldest finished
# ones go past MAX_SERVICES_PER_NODE; past either limit with none to drop, POST /services
# answers 503 (the Rust agent then runs the service untracked).
MAX_SERVICES, MAX_SERVICES_PER_NODE = 100_000, 100


def _of_service(service: Service, *_: Any) -> Route:
    return OfNode(service.node_id)


@operation(_of_service)
def create_service(shard: Shard, service: Service, caller: str) -> Steps[bytes]:
    call = service_scripts.create_service(
        service.node_id,
        msgspec.json.encode(service),
        caller,
        MAX_SERVICES,
        MAX_SERVICES_PER_NODE,
        shard.service_numbering,
    )
    return (yield from run(call))


@operation(by_service)
def service(shard: Shard, service_id: str) -> Steps[bytes | None]:
    blob: bytes | None = yield from send("HGET", shard.keys.services, service_id)
    return blob


@operation(by_service)
def set_service_status(shard: Shard, service_id: str, status: str, caller: str) -> Steps[None]:
    if shard.count > 1 and not service_id.startswith(SERVICE_ID_PREFIX):
        raise ServiceNotFound()  # no shard's: it names none
    yield from run(service_scripts.set_service_status(service_id, status, caller))


def _node_or_every(node_id: str, *_: Any) -> Route:
    return OfNode(node_id) if node_id else Each(merged_services)


@operation(_node_or_every)
def services(shard: Shard, node_id: str, status: str, caller: str) -> Steps[list[bytes]]:
    """A node's services (its shard's), or every node's (each shard's, in id order)."""
    return (yield from run(service_scripts.list_services(node_id, status, caller)))
