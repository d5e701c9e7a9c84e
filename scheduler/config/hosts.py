"""ALLOWED_HOSTS: the Host names the API answers (api/boundary.py), as a setting parsed."""

from __future__ import annotations

import re

from scheduler.config.errors import ConfigError

# Always allowed Host names: a page elsewhere cannot make a browser send them (a name it
# controls rebound to 127.0.0.1 is still sent as that name).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_HOST = "*"
# A host name or IPv4 address, or an IPv6 address (brackets optional): the host part of a
# Host header, lowercased, without its port.
HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[?[0-9a-f:.]*:[0-9a-f:.]*\]?")


def host_names(setting: str) -> frozenset[str]:
    """ALLOWED_HOSTS as the names it allows ("*" for any), lowercased, IPv6 addresses
    without brackets; ConfigError naming ALLOWED_HOSTS for an entry that is not a host."""
    names = set()
    for entry in setting.lower().split(","):
        name = entry.strip()
        if not name:
            continue
        if name != ANY_HOST and not HOST_NAME.fullmatch(name):
            raise ConfigError(
                f"ALLOWED_HOSTS: {entry.strip()!r} is not a host name or address (no scheme, "
                "port or path; * for any)"
            )
        names.add(name.strip("[]"))
    return frozenset(names)
