"""Lists of networks in settings (AGENT_NETWORKS, TRUSTED_PROXIES): comma-separated CIDRs,
parsed by the stdlib's ipaddress at start, so a typo stops the process naming the variable
instead of opening or closing the agent routes to the wrong callers."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network

Network = IPv4Network | IPv6Network
Networks = tuple[Network, ...]

# IPv4 addresses written as IPv6 (::ffff:a.b.c.d): a dual-stack socket reports IPv4 peers so.
IPV4_MAPPED = IPv6Network("::ffff:0:0/96")


class NetworkListError(ValueError):
    """An item of a network list is not a network; the message says which and why."""


def parse_networks(raw: str) -> Networks:
    """`10.0.0.0/8, 127.0.0.1` as networks (a bare address is its own /32 or /128); empty
    items are skipped. Host bits set (`10.1.2.3/8`) are refused: the operator meant either
    the address or the network, and guessing would widen or narrow what is let in. An
    IPv4-mapped IPv6 network is kept as the IPv4 network it is, as addresses are compared."""
    networks: list[Network] = []
    for item in raw.split(","):
        text = item.strip()
        if not text:
            continue
        try:
            network = ip_network(text)
        except ValueError as exc:
            raise NetworkListError(f"{text!r} is not a CIDR such as 10.0.0.0/8 ({exc})") from None
        networks.append(_unmapped(network))
    return tuple(networks)


def any_network(networks: Networks) -> bool:
    """Whether the list lets every caller in: empty (no list) or holding a /0 (0.0.0.0/0,
    ::/0), which a start check must not take for a narrowing."""
    return not networks or any(network.prefixlen == 0 for network in networks)


def _unmapped(network: Network) -> Network:
    if isinstance(network, IPv6Network) and network.subnet_of(IPV4_MAPPED):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None  # inside ::ffff:0:0/96
        return IPv4Network((mapped, network.prefixlen - 96))
    return network
