"""The nodes' and services' entries of the route table (routes.TABLE, where they stand in its
order; its docstring says what an entry says): the built-in registry's (REGISTRY_URL unset),
what the Rust agent calls, and with either registry the nodes listed and drained."""

from __future__ import annotations

from scheduler.api import nodes, services
from scheduler.api.described import DONE, body, got, text
from scheduler.api.routing import Access, Entry, Method
from scheduler.models.access_key import Role
from scheduler.models.registry import (
    DrainRequest,
    Heartbeat,
    Instance,
    Node,
    NodeBeat,
    NodeDrained,
    NodeRegistered,
    NodeRegistration,
    NodeUndrained,
    Service,
    ServiceCreate,
    ServiceUpdate,
)

READER, SUBMITTER, OPERATOR, ADMIN = Role.READER, Role.SUBMITTER, Role.OPERATOR, Role.ADMIN
AGENT = Access.AGENT
NODE_GONE = {404: text("node not found")}
SERVICE_GONE = {404: text("service not found")}

ENTRIES = [
    # The built-in registry (REGISTRY_URL unset): what the Rust agent calls.
    Entry(
        "/nodes/register",
        {
            "POST": Method(
                nodes.register,
                AGENT,
                role=ADMIN,
                summary="Register a node (again)",
                body=body(NodeRegistration),
                answers=got(NodeRegistered, "the node", 201),
            )
        },
        "registry",
    ),
    Entry(
        "/nodes/heartbeat",
        {
            "POST": Method(
                nodes.heartbeat,
                AGENT,
                role=ADMIN,
                summary="A node is alive",
                body=body(Heartbeat),
                answers={**got(NodeBeat, "the node"), **NODE_GONE},
            )
        },
        "registry",
    ),
    # Either registry's nodes: with REGISTRY_URL, read from it (nodes/registry.py).
    Entry(
        "/nodes",
        {
            "GET": Method(
                nodes.list_nodes,
                reads=("role",),
                role=READER,
                summary="The nodes, by id",
                answers=got(dict[str, Node]),
            )
        },
    ),
    # The key, or in token mode a node's own token (nodes.delete_node decides).
    Entry(
        "/nodes/{node_id}",
        {
            "DELETE": Method(
                nodes.delete_node,
                AGENT,
                anyone_in_open_mode=False,
                role=OPERATOR,
                summary="Remove a node (its pending jobs move to live nodes)",
                answers={**DONE, **NODE_GONE},
            )
        },
        "registry",
    ),
    # Drains (docs/GUIDE.md, Drain), with either registry: the key, or in token mode a node's
    # own token for its own node as it stops (nodes.drain and nodes.undrain decide).
    Entry(
        "/nodes/{node_id}/drain",
        {
            "POST": Method(
                nodes.drain,
                AGENT,
                anyone_in_open_mode=False,
                role=OPERATOR,
                summary="Drain a node: no new job goes to it, its jobs not running move",
                body=body(DrainRequest, required=False),
                answers={**got(NodeDrained), **NODE_GONE},
            )
        },
    ),
    Entry(
        "/nodes/{node_id}/undrain",
        {
            "POST": Method(
                nodes.undrain,
                AGENT,
                anyone_in_open_mode=False,
                role=OPERATOR,
                summary="Lift a node's drain",
                answers={**got(NodeUndrained), **NODE_GONE},
            )
        },
    ),
    # The agents' instances (always none here): their call, read before each poll.
    Entry(
        "/instances",
        {
            "GET": Method(
                nodes.list_instances,
                AGENT,
                reads=("node_id",),
                role=ADMIN,
                summary="The instances (always none with the built-in registry)",
                answers=got(list[Instance]),
            )
        },
        "registry",
    ),
    Entry(
        "/services",
        {
            "GET": Method(
                services.list_services,
                Access.OWN_SERVICES,
                reads=("node_id", "status"),
                role=READER,
                summary="The services (an agent's own: node_id)",
                answers=got(list[Service]),
            ),
            "POST": Method(
                services.create,
                AGENT,
                role=ADMIN,
                summary="Register a service an agent started",
                body=body(ServiceCreate),
                answers=got(Service, "the service", 201),
            ),
        },
        "registry",
    ),
    Entry(
        "/services/{service_id}",
        {
            "GET": Method(
                services.get_service,
                role=READER,
                summary="A service",
                answers={**got(Service), **SERVICE_GONE},
            ),
            "PATCH": Method(
                services.update,
                AGENT,
                role=ADMIN,
                summary="A service's new status, from its agent",
                body=body(ServiceUpdate),
                answers={**DONE, **SERVICE_GONE},
            ),
            # The operator's stop.
            "DELETE": Method(
                services.stop,
                role=OPERATOR,
                summary="Stop a service (its agent kills it at its next look)",
                answers={**DONE, **SERVICE_GONE},
            ),
        },
        "registry",
    ),
]
