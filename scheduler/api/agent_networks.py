"""AGENT_NETWORKS: the agent routes answer only callers from these networks (README,
Security), so an original Rust agent, which sends no credentials, can keep open mode in a
private network without its routes being open to everyone who reaches the API.

The agent routes are the route table's agent calls (`RouteTable.access` says AGENT: the
report, register, heartbeat, a node's own services and DELETE /nodes/{id}, the poll). A
caller outside the networks gets 403 before any Redis work or body read, from this
middleware on the ASGI path and from the lane (lane.Lane.refusal), with the same answer. The
rule holds in token mode too (defence in depth: a leaked node token or join key is worth
nothing outside the agents' networks). The admin key passes anywhere: it opens every job
and node through the operator's routes already, and DELETE /nodes/{id} is the operator's call
as much as a node's; a named key passes to DELETE /nodes/{id} and the drains only (its role
decides there), and elsewhere is refused, not counted (it is right, but makes no agent call).
So from outside, the keys are the credentials compared: any other a caller sends is a wrong
one, counted (guesses.py).
"""

from __future__ import annotations

import functools

from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.api.client_address import Headers, client_address, within
from scheduler.api.guesses import Credentials, Refusal
from scheduler.api.http import text_error
from scheduler.api.params import PARAMS, Query
from scheduler.api.routing import Access, RouteTable
from scheduler.config import Settings
from scheduler.config.networks import Networks
from scheduler.models.access_key import ADMIN

FORBIDDEN = "forbidden: agent calls are open to AGENT_NETWORKS only"
# Decisions remembered by (peer, X-Forwarded-For): parsing an address costs more than the
# rest of a poll's check (~1.3 of ~8 µs of the lane's Python). Room for MAX_NODES' default
# of agents polling in turn (an LRU smaller than its cycle misses every time); bounded, so a
# client varying its header only costs its own recomputation.
CACHED_DECISIONS = 16384


class AgentNetworks:
    def __init__(self, networks: Networks, trusted: Networks, credentials: Credentials) -> None:
        self.networks = networks
        self.trusted = trusted
        self.credentials = credentials  # the key, which passes from anywhere
        self._decide = functools.lru_cache(maxsize=CACHED_DECISIONS)(self._from_networks)

    @classmethod
    def from_settings(cls, settings: Settings, credentials: Credentials) -> AgentNetworks | None:
        """The rule, or None when AGENT_NETWORKS is empty (any caller, as the original)."""
        networks = settings.agent_network_list
        if not networks:
            return None
        return cls(networks, settings.trusted_proxy_list, credentials)

    def allows(
        self, peer: str | None, headers: list[tuple[bytes, bytes]], operators: bool = False
    ) -> bool:
        """Whether a caller may make an agent call: its address (client_address) is in the
        networks, or it holds the admin key (TINYAWS_API_KEY). A named key passes only to
        the operator's node routes (`operators`: DELETE /nodes/{id}, the drains), whose
        handler checks its role (agents.AgentAuth.operator_or_node): named keys make no
        other agent call, and in open mode those take anyone, so a reader's key passing
        here would claim jobs with their env_vars, report, register nodes, from anywhere."""
        # The header matters only behind a trusted proxy; otherwise the peer decides alone.
        forwarded = _forwarded(headers) if self.trusted else ()
        if self._decide(peer, forwarded):
            return True
        caller = self.credentials.caller(headers)
        return caller is ADMIN or (operators and caller is not None)

    def _from_networks(self, peer: str | None, forwarded: tuple[bytes, ...]) -> bool:
        headers = [(b"x-forwarded-for", value) for value in forwarded]
        address = client_address(peer, headers, self.trusted)
        return address is not None and within(address, self.networks)


def _forwarded(headers: Headers) -> tuple[bytes, ...]:
    return tuple(value for name, value in headers if name == b"x-forwarded-for")


class AgentNetworksGate:
    """Pure ASGI middleware: the agent calls of a caller outside AGENT_NETWORKS get 403
    before the app sees them (nothing read; Redis only counts a credential it sent, which
    was not the key: guesses.py, 429 past the limit)."""

    def __init__(self, app: ASGIApp, networks: AgentNetworks, routes: RouteTable) -> None:
        self.app = app
        self.networks = networks
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            outside: Refusal = (403, FORBIDDEN, {})
            refused = await self.networks.credentials.refused_asgi(scope, outside)
            await text_error(*refused)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        query: Query = scope[PARAMS]  # the door's (http.ParamsDoor), which runs first
        method = scope["method"]
        if self.routes.access(method, query.path, query.values) is not Access.AGENT:
            return True
        served = self.routes.serving(method, query.path)
        operators = served is not None and served[1] is not None and served[1].operators
        client = scope.get("client")
        return self.networks.allows(client[0] if client else None, scope["headers"], operators)
