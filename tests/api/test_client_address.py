"""client_address (scheduler/api/client_address.py), the one rule for who a request is from:
the socket's peer, or behind TRUSTED_PROXIES the first untrusted address of X-Forwarded-For
read right to left."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from scheduler.api.agent_networks import AgentNetworks
from scheduler.api.client_address import client_address, parse_address
from scheduler.api.guesses import Credentials
from scheduler.config.networks import parse_networks

LB = "10.0.0.2/32, 10.0.1.0/24, fd00::/64"  # the trusted proxies of the table

# peer, X-Forwarded-For header lines, the client (None: not known)
TABLE: list[tuple[str | None, list[str], str | None]] = [
    # An untrusted peer is the client, whatever its header says.
    ("203.0.113.9", [], "203.0.113.9"),
    ("203.0.113.9", ["10.99.0.7"], "203.0.113.9"),
    ("192.0.2.1", ["10.0.0.2"], "192.0.2.1"),
    # A trusted proxy: the header's last address it appended.
    ("10.0.0.2", ["198.51.100.4"], "198.51.100.4"),
    ("10.0.0.2", [" 198.51.100.4 "], "198.51.100.4"),
    # What the client wrote itself is left of what the proxies appended: never reached.
    ("10.0.0.2", ["10.99.0.7, 198.51.100.4"], "198.51.100.4"),
    ("10.0.0.2", ["10.99.0.7", "198.51.100.4"], "198.51.100.4"),  # two lines are one list
    # Trusted hops are skipped, right to left.
    ("10.0.0.2", ["198.51.100.4, 10.0.1.5"], "198.51.100.4"),
    ("10.0.0.2", ["10.99.0.7, 198.51.100.4, 10.0.1.5, 10.0.1.6"], "198.51.100.4"),
    # Trusted all the way: the farthest hop; no header: the proxy itself.
    ("10.0.0.2", ["10.0.1.5, 10.0.1.6"], "10.0.1.5"),
    ("10.0.0.2", [], "10.0.0.2"),
    # Garbage where the client's address should be: not known.
    ("10.0.0.2", ["unknown"], None),
    ("10.0.0.2", ["10.99.0.7, not-an-ip"], None),
    ("10.0.0.2", [""], None),
    ("10.0.0.2", ["198.51.100.4,"], None),
    # Ports and brackets as some proxies write them.
    ("10.0.0.2", ["198.51.100.4:5123"], "198.51.100.4"),
    ("10.0.0.2", ["[2001:db8::1]:443"], "2001:db8::1"),
    ("10.0.0.2", ["[2001:db8::1]"], "2001:db8::1"),
    ("10.0.0.2", ["2001:db8::1"], "2001:db8::1"),
    # IPv4-mapped IPv6 (a dual-stack socket's IPv4 peer) is the IPv4 address, trusted or not.
    ("::ffff:10.0.0.2", ["198.51.100.4"], "198.51.100.4"),
    ("::ffff:203.0.113.9", ["10.99.0.7"], "203.0.113.9"),
    ("10.0.0.2", ["::ffff:198.51.100.4"], "198.51.100.4"),
    # IPv6 proxies.
    ("fd00::5", ["198.51.100.4"], "198.51.100.4"),
    ("fd00:1::5", ["198.51.100.4"], "fd00:1::5"),
    # No peer address (a Unix socket) or one that is not an address.
    (None, ["198.51.100.4"], None),
    ("testclient", [], None),
]


@pytest.mark.parametrize(("peer", "forwarded", "expected"), TABLE)
def test_client_address(peer: str | None, forwarded: list[str], expected: str | None) -> None:
    headers = [(b"host", b"api"), *((b"x-forwarded-for", line.encode()) for line in forwarded)]
    found = client_address(peer, headers, parse_networks(LB))
    assert found == (None if expected is None else ip_address(expected))


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    headers = [(b"x-forwarded-for", b"10.99.0.7")]
    assert client_address("10.0.0.2", headers, ()) == ip_address("10.0.0.2")


@pytest.mark.parametrize(
    "text",
    ["", " ", "1.2.3", "1.2.3.4:x", "1.2.3.4:", "[::1", "[::1]x", "[::1]:", "::ffff:", "a.b.c.d"],
)
def test_what_is_not_an_address(text: str) -> None:
    assert parse_address(text) is None


def test_the_agent_networks_rule() -> None:
    rule = AgentNetworks(
        parse_networks("10.99.0.0/16"), parse_networks("10.0.0.2"), Credentials("key")
    )
    forwarded = [(b"x-forwarded-for", b"10.99.3.4")]
    assert rule.allows("10.99.0.1", [])
    assert not rule.allows("127.0.0.1", forwarded)  # not a trusted proxy
    assert rule.allows("10.0.0.2", forwarded)
    assert not rule.allows("10.0.0.2", [(b"x-forwarded-for", b"10.99.3.4, 1.2.3.4")])
    assert rule.allows("10.0.0.2", forwarded)  # the decision cached per (peer, header)
    # The operator's key passes from anywhere; nothing else does.
    assert rule.allows("127.0.0.1", [(b"authorization", b"Bearer key")])
    assert not rule.allows("127.0.0.1", [(b"authorization", b"Bearer other")])
    assert not AgentNetworks(parse_networks("10.99.0.0/16"), (), Credentials()).allows(
        "127.0.0.1", []
    )
