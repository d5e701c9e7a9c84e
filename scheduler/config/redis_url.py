"""REDIS_URL: the forms it takes (docs/CONFIGURATION.md) as typed targets. The connection
code (store/connection/) reaches Redis by these; config.Settings validates REDIS_URL with
`parse` and names the variable in its error."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

# REDIS_URL. The forms (docs/CONFIGURATION.md): redis://, rediss:// and unix:// as redis-py
# reads them; redis+sentinel:// as rq-dashboard's redis-sentinel-url package reads it (so the
# dashboard takes the same URL); redis+cluster:// with seed nodes.
SENTINEL_PORT, REDIS_PORT = 26379, 6379


@dataclass(frozen=True, slots=True)
class DirectRedis:
    """One Redis at a fixed address."""

    url: str


@dataclass(frozen=True, slots=True)
class SentinelRedis:
    """The primary of `service`, as the sentinels name it (after a failover, the new one)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterRedis:
    """A Redis Cluster, found from any of `seeds`; all keys of a deployment share one slot."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


RedisTarget = DirectRedis | SentinelRedis | ClusterRedis


def parse(url: str) -> RedisTarget:
    """REDIS_URL as a typed target; ValueError saying what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss", "unix"):
        _direct_db(parts.scheme, parts.path, parts.query)
        if parts.scheme == "rediss":
            _tls_options(parts.query)
        if parts.scheme != "unix":
            parts.port  # noqa: B018 (raises ValueError on a bad port)
        elif not parts.path:
            raise ValueError("unix:// needs a socket path")
        return DirectRedis(url)
    if parts.scheme not in ("redis+sentinel", "redis+cluster"):
        raise ValueError("use redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://")
    auth, _, hostspec = parts.netloc.rpartition("@")
    user, _, password = auth.partition(":")
    username = unquote(user) or None
    secret = unquote(password) if ":" in auth else None
    if parts.scheme == "redis+cluster":
        if parts.path not in ("", "/", "/0") or parts.query:
            raise ValueError("a cluster has only database 0, and takes no options")
        return ClusterRedis(_hosts(hostspec, REDIS_PORT), username, secret)
    names = [p for p in parts.path.split("/")[1:] if p]
    if not 1 <= len(names) <= 2 or "" in parts.path.split("/")[1:-1]:
        raise ValueError("the path is /service_name or /service_name/db")
    db = _whole(names[1], "db") if len(names) == 2 else 0
    options = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(options) - {"sentinel_password"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]!r} (only sentinel_password)")
    sentinel_password = options.get("sentinel_password", [None])[-1]
    return SentinelRedis(
        _hosts(hostspec, SENTINEL_PORT), unquote(names[0]), db, username, secret, sentinel_password
    )


def _direct_db(scheme: str, path: str, query: str) -> None:
    given = parse_qs(query).get("db", [])
    if scheme != "unix" and given:
        # redis-py would take it over the path, the API's connection the path.
        raise ValueError("the database is the path (/N), not ?db=")
    if len(given) > 1:
        raise ValueError("db is given twice")
    # Only unix:// has ?db= now; its path is the socket's.
    db = given[0] if given else ("" if scheme == "unix" else path.strip("/"))
    if db:
        _whole(db, "db")


# rediss:// options read by the API's connection (store/connection/mux.py, tls_context) as
# by redis-py.
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
TLS_OPTIONS = (*TLS_FILES, "ssl_ca_path", "ssl_password", "ssl_cert_reqs", "ssl_check_hostname")
TLS_CERT_REQS = ("none", "optional", "required")
TLS_BOOLEANS = ("true", "false", "1", "0", "yes", "no", "y", "n", "t", "f")


def _tls_options(query: str) -> None:
    """Checked at start: a wrong one would otherwise fail each connection to Redis, or be
    read differently by the API's connection and by redis-py."""
    given = parse_qs(query, keep_blank_values=True)
    for name, values in given.items():
        if name.startswith("ssl_") and name not in TLS_OPTIONS:
            raise ValueError(f"unknown option {name!r} (TLS: {', '.join(TLS_OPTIONS)})")
        if name in TLS_OPTIONS and len(values) > 1:
            raise ValueError(f"{name} is given twice")
    options = {name: values[0] for name, values in given.items()}
    for name in TLS_FILES:
        if options.get(name) and not os.path.isfile(options[name]):
            raise ValueError(f"{name}: no such file {options[name]!r}")
    if options.get("ssl_ca_path") and not os.path.isdir(options["ssl_ca_path"]):
        raise ValueError(f"ssl_ca_path: no such directory {options['ssl_ca_path']!r}")
    if options.get("ssl_keyfile") and not options.get("ssl_certfile"):
        raise ValueError("ssl_keyfile needs ssl_certfile")
    if options.get("ssl_cert_reqs", "required") not in TLS_CERT_REQS:
        raise ValueError(f"ssl_cert_reqs is one of {', '.join(TLS_CERT_REQS)} (lowercase)")
    if options.get("ssl_check_hostname", "true").lower() not in TLS_BOOLEANS:
        raise ValueError("ssl_check_hostname is true or false")


def _hosts(hostspec: str, default_port: int) -> tuple[tuple[str, int], ...]:
    hosts = []
    for item in hostspec.split(","):
        if item.startswith("["):  # an IPv6 address, [::1]:26379
            host, _, rest = item[1:].partition("]")
            if rest and not rest.startswith(":"):
                raise ValueError(f"bad host {item!r}")
            port = rest[1:]
        else:
            host, _, port = item.partition(":")
        if not host:
            raise ValueError(f"no host in {item!r}")
        hosts.append((host, _whole(port, "port") if port else default_port))
    return tuple(hosts)


def _whole(text: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{what} {text!r} is not a whole number")
    value = int(text)
    if what == "port" and not 0 < value < 65536:
        raise ValueError(f"port {value} is out of range")
    return value


def redact(url: str) -> str:
    """The URL without its password, for error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    auth, _, hostspec = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{auth.partition(':')[0]}:***@{hostspec}").geturl()
