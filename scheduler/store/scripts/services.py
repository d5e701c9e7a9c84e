"""The built-in registry's service scripts: what the Rust agent registers for each service job
it runs, and reads back to learn which to stop (CONTRACT 3.4, 3.5). Each with its call."""

from __future__ import annotations

from typing import Any

from scheduler.models.job import job_number
from scheduler.store.errors import NodeNotRegistered, ServiceNotFound, TooManyServices
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_access, check_found
from scheduler.store.scripts.script import Call, Script
from scheduler.store.shards import SERVICE_ID_PREFIX as SERVICE_ID_PREFIX
from scheduler.store.shards import UNSHARDED, Numbering


def _service_created(reply: list[Any]) -> bytes:
    check_access(reply[0])
    check_found(reply[0], NodeNotRegistered)
    if reply[0] == codes.TOO_MANY_NODES:
        raise TooManyServices()
    blob: bytes = reply[1]
    return blob


def service_number(service_id: str) -> int | None:
    """N of a service id svc-N, or None (as models.job.job_number reads job-N)."""
    if not service_id.startswith(SERVICE_ID_PREFIX):
        return None
    return job_number("job-" + service_id.removeprefix(SERVICE_ID_PREFIX))


CREATE_SERVICE = Script(
    "CREATE_SERVICE",
    "node record caller most most_per_node shards shard id_floor",
    _service_created,
)


def create_service(
    node_id: str,
    service_json: bytes,
    caller: str,
    most: int,
    most_per_node: int,
    numbering: Numbering = UNSHARDED,
) -> Call[bytes]:
    """`service_json` starts with `{"id":""` (models.Service, id first); the script fills it.
    `numbering`: how the node's shard draws service numbers (store/shards.py)."""
    return CREATE_SERVICE.call(
        node=node_id,
        record=service_json,
        caller=caller,
        most=most,
        most_per_node=most_per_node,
        shards=numbering.count,
        shard=numbering.index,
        id_floor=numbering.floor,
    )


def _service_set(code: int) -> None:
    check_found(code, ServiceNotFound)


SET_SERVICE_STATUS = Script(
    "SET_SERVICE_STATUS",
    "service_id status caller",
    _service_set,
)


def set_service_status(service_id: str, status: str, caller: str) -> Call[None]:
    return SET_SERVICE_STATUS.call(service_id=service_id, status=status, caller=caller)


def _services(reply: list[Any]) -> list[bytes]:
    check_access(reply[0])
    return list(reply[1:])


LIST_SERVICES = Script(
    "LIST_SERVICES",
    "node status caller",
    _services,
    read_only=True,
)


def list_services(node_id: str, status: str, caller: str) -> Call[list[bytes]]:
    return LIST_SERVICES.call(node=node_id, status=status, caller=caller)
