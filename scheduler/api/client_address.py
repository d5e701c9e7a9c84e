"""Who is on the other end of a request: the one rule for the client's address, read by the
agent networks (agent_networks.py) on the ASGI path and the hot lane alike, and by anything
that counts per client.

The socket's peer is the client, unless the peer is one of TRUSTED_PROXIES: then its
X-Forwarded-For is read right to left (each proxy appends the address it got the request
from), skipping the trusted proxies, and the first address that is not one is the client.
What a client wrote itself into the header is to the left of what our proxies appended, so it
is never reached; a peer that is not a trusted proxy has its header ignored altogether.
uvicorn's --proxy-headers does the same for ASGI only (the lane bypasses ASGI middleware), so
`scheduler serve` turns it off and this is the one rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import IPv4Address, IPv6Address, ip_address

from scheduler.config.networks import Networks

IPAddress = IPv4Address | IPv6Address
Headers = Iterable[tuple[bytes, bytes]]


def client_address(peer: str | None, headers: Headers, trusted: Networks) -> IPAddress | None:
    """The client's address, from the socket's peer (`peer`: its host, None on a Unix socket)
    and the request's headers (names lowercased, as ASGI and uvicorn give them). None when it
    is not known: no peer address, or a forwarded entry that is not an address (garbage, or
    `unknown`) where the client's should be."""
    address = parse_address(peer)
    if address is None or not trusted or not within(address, trusted):
        return address
    for hop in reversed(forwarded_for(headers)):
        address = parse_address(hop)
        if address is None or not within(address, trusted):
            return address
    # Trusted all the way (or no header): the farthest hop known, a proxy's own request.
    return address


def forwarded_for(headers: Headers) -> list[str]:
    """The X-Forwarded-For entries, left to right; several header lines are one list, in
    order (RFC 9110, 5.3)."""
    hops: list[str] = []
    for name, value in headers:
        if name == b"x-forwarded-for":
            hops += value.decode("latin-1").split(",")
    return hops


def parse_address(text: str | None) -> IPAddress | None:
    """An address as a peer or a proxy writes it: bare, `a.b.c.d:port`, `[v6]` or
    `[v6]:port`; an IPv4-mapped IPv6 address (a dual-stack socket's IPv4 peer) is the IPv4
    address. None for anything else."""
    if text is None:
        return None
    text = text.strip()
    if text.startswith("["):
        text, closed, port = text[1:].partition("]")
        if not closed or not _port_or_nothing(port):
            return None
    elif text.count(":") == 1:
        text, _, port = text.partition(":")
        if not _port_or_nothing(":" + port):
            return None
    try:
        address = ip_address(text)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _port_or_nothing(text: str) -> bool:
    """What may follow an address: nothing, or `:` and a port number."""
    return not text or (text[0] == ":" and text[1:].isascii() and text[1:].isdigit())


def within(address: IPAddress, networks: Networks) -> bool:
    """Whether `address` is in one of `networks` (an IPv4 address is in no IPv6 network)."""
    return any(address in network for network in networks)
