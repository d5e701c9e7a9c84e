"""Settings: one typed object built from the environment.

Names follow the original scheduler where it has them (CONTRACT 2.1). As there, a variable set
to the empty string means the default. Unlike the original, a value that does not parse stops
the process at start with a message naming the variable, instead of silently running with a
default the operator did not ask for.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

T = TypeVar("T")

MiB = 1024 * 1024
# What a REDIS_PREFIX may hold: no braces (store/keys.py wraps it in a hash tag), no glob
# characters, and nothing rq refuses in its RQ_KEY_PREFIX (built from it).
REDIS_PREFIX_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str = field(default="redis://127.0.0.1:6379/0", metadata={"env": "REDIS_URL"})
    redis_prefix: str = field(default="sched", metadata={"env": "REDIS_PREFIX"})
    # Every state change waits (WAIT, in the same round trip) for this many replicas to hold
    # it, so a failover loses no acknowledged change; fewer within the timeout is a 503.
    redis_min_replicas_acked: int = field(
        default=0, metadata={"env": "REDIS_MIN_REPLICAS_ACKED", "min": 0}
    )
    # At least 1: WAIT's 0 would block forever.
    redis_replicas_ack_timeout_ms: int = field(
        default=1000, metadata={"env": "REDIS_REPLICAS_ACK_TIMEOUT_MS", "min": 1}
    )
    registry_url: str = field(default="", metadata={"env": "REGISTRY_URL"})
    registry_cache_secs: float = field(
        default=1.0, metadata={"env": "REGISTRY_CACHE_SECS", "min": 0}
    )
    registry_timeout_secs: float = field(
        default=3.0, metadata={"env": "REGISTRY_TIMEOUT_SECS", "min": 0.1}
    )
    api_key: str = field(default="", metadata={"env": "TINYAWS_API_KEY"})
    # Who may make the agent calls (README, "Security"): "open" as the original (its Rust
    # agent sends no key), or "token": a node token from POST /nodes/register, or the key.
    agent_auth: str = field(default="open", metadata={"env": "AGENT_AUTH"})
    # A secret that only registers nodes (token mode): agents hold it instead of the key.
    agent_join_key: str = field(default="", metadata={"env": "AGENT_JOIN_KEY"})
    max_nodes: int = field(default=10_000, metadata={"env": "MAX_NODES", "min": 1})
    # Prometheus metrics at /metrics and the request counting behind them: "on" or "off".
    metrics: str = field(default="on", metadata={"env": "METRICS"})
    max_jobs_per_node: int = field(default=1, metadata={"env": "MAX_JOBS_PER_NODE", "min": 1})
    max_job_retries: int = field(default=1, metadata={"env": "MAX_JOB_RETRIES", "min": 0})
    job_timeout_secs: int = field(default=3600, metadata={"env": "JOB_TIMEOUT_SECS", "min": 1})
    # A cancelled running job's agent has this long to kill it and say so; then it is
    # cancelled anyway (the original agent cannot be told) and its node's slot is free.
    cancel_grace_secs: float = field(default=60.0, metadata={"env": "CANCEL_GRACE_SECS", "min": 1})
    node_ttl_secs: float = field(default=30.0, metadata={"env": "NODE_TTL_SECS", "min": 1})
    # 0: four times NODE_TTL_SECS (see node_lost_after).
    node_lost_secs: float = field(default=0.0, metadata={"env": "NODE_LOST_SECS", "min": 0})
    # How long a done or failed job stays in Redis after it finished; 0 keeps it forever (as
    # the original). Older ones live on in the SQLite snapshot only.
    job_retention_secs: float = field(default=0.0, metadata={"env": "JOB_RETENTION_SECS", "min": 0})
    output_limit_bytes: int = field(
        default=MiB, metadata={"env": "OUTPUT_LIMIT_BYTES", "min": 1024}
    )
    max_body_bytes: int = field(default=MiB, metadata={"env": "MAX_BODY_BYTES", "min": 1024})
    max_report_bytes: int = field(default=64 * MiB, metadata={"env": "MAX_REPORT_BYTES"})
    # Bytes of agent report bodies one API process holds at once, counted as they arrive;
    # past it, 503 Retry-After. Two maximum-size reports: the original Rust agent never retries
    # a report, so a refusal loses its result. A report costs about twice its size while it is
    # decoded (benchmarks/report_flood.py).
    report_bytes_in_flight: int = field(
        default=128 * MiB, metadata={"env": "REPORT_BYTES_IN_FLIGHT"}
    )
    max_page_bytes: int = field(default=32 * MiB, metadata={"env": "MAX_PAGE_BYTES", "min": 1024})
    scheduler_db: str = field(default="scheduler.db", metadata={"env": "SCHEDULER_DB"})
    sqs_url: str = field(default="", metadata={"env": "SQS_URL"})
    sns_url: str = field(default="", metadata={"env": "SNS_URL"})
    sweep_interval_secs: float = field(
        default=10.0, metadata={"env": "SWEEP_INTERVAL_SECS", "min": 0.1}
    )
    sqs_poll_secs: float = field(default=5.0, metadata={"env": "SQS_POLL_SECS", "min": 0.1})
    snapshot_interval_secs: float = field(
        default=5.0, metadata={"env": "SNAPSHOT_INTERVAL_SECS", "min": 0.1}
    )
    http_timeout_secs: float = field(default=5.0, metadata={"env": "HTTP_TIMEOUT_SECS", "min": 0.1})
    # The rq workers (workers/): SQS idempotency, outbox, SNS retries, rq's own maintenance.
    sqs_dedup_ttl_secs: int = field(
        default=7 * 86400, metadata={"env": "SQS_DEDUP_TTL_SECS", "min": 60}
    )
    sqs_max_per_poll: int = field(default=1000, metadata={"env": "SQS_MAX_PER_POLL", "min": 1})
    outbox_flush_secs: float = field(default=1.0, metadata={"env": "OUTBOX_FLUSH_SECS", "min": 0.1})
    sns_retry_max: int = field(default=15, metadata={"env": "SNS_RETRY_MAX", "min": 1})
    sns_retry_base_secs: int = field(default=1, metadata={"env": "SNS_RETRY_BASE_SECS", "min": 1})
    sns_retry_cap_secs: int = field(default=300, metadata={"env": "SNS_RETRY_CAP_SECS"})
    worker_maintenance_secs: int = field(
        default=60, metadata={"env": "WORKER_MAINTENANCE_SECS", "min": 1}
    )
    worker_abandon_grace_secs: int = field(
        default=60, metadata={"env": "WORKER_ABANDON_GRACE_SECS", "min": 1}
    )
    worker_lock_secs: float = field(default=5.0, metadata={"env": "WORKER_LOCK_SECS", "min": 1})
    # The upgrade from the layout before the hash tag (store/migrate.py) first watches the
    # old keys this long: a process of the old version still writing them (an agent's
    # heartbeat every 10 s, a job) stops it. 0 = look once, at the rq workers and long-polls.
    upgrade_watch_secs: float = field(
        default=12.0, metadata={"env": "UPGRADE_WATCH_SECS", "min": 0}
    )
    # The reference agent (`scheduler agent`) and the command-line client.
    scheduler_url: str = field(default="http://127.0.0.1:9001", metadata={"env": "SCHEDULER_URL"})
    agent_node_id: str = field(default="", metadata={"env": "AGENT_NODE_ID"})
    agent_poll_secs: float = field(default=3.0, metadata={"env": "AGENT_POLL_SECS", "min": 0.05})
    # Long-poll: the scheduler holds a poll up to this long until the node has work (0: off).
    agent_poll_wait_secs: float = field(
        default=20.0, metadata={"env": "AGENT_POLL_WAIT_SECS", "min": 0}
    )
    agent_heartbeat_secs: float = field(
        default=10.0, metadata={"env": "AGENT_HEARTBEAT_SECS", "min": 0.1}
    )
    agent_grace_secs: float = field(default=30.0, metadata={"env": "AGENT_GRACE_SECS", "min": 0})
    agent_work_dir: str = field(default="", metadata={"env": "AGENT_WORK_DIR"})
    agent_limits: str = field(default="auto", metadata={"env": "AGENT_LIMITS"})
    agent_run_memory_mb: int = field(
        default=512, metadata={"env": "AGENT_RUN_MEMORY_MB", "min": 16}
    )
    agent_run_cpus: int = field(default=1, metadata={"env": "AGENT_RUN_CPUS", "min": 1})
    agent_service_memory_mb: int = field(
        default=1024, metadata={"env": "AGENT_SERVICE_MEMORY_MB", "min": 16}
    )
    agent_service_cpus: int = field(default=2, metadata={"env": "AGENT_SERVICE_CPUS", "min": 1})
    agent_deploy_max_bytes: int = field(
        default=100 * MiB, metadata={"env": "AGENT_DEPLOY_MAX_BYTES", "min": 1024}
    )

    @property
    def node_lost_after(self) -> float:
        """Seconds of silence after which a node's pending jobs move (built-in registry)."""
        return self.node_lost_secs or 4 * self.node_ttl_secs

    @property
    def redis_target(self) -> RedisTarget:
        """Where Redis is: REDIS_URL parsed (validate has checked that it parses)."""
        return parse_redis_url(self.redis_url)

    @property
    def builtin_registry(self) -> bool:
        """With no REGISTRY_URL the scheduler is its own node registry."""
        return not self.registry_url

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f.metadata["env"], "")
            if raw != "":
                values[f.name] = _PARSERS[f.type](f.metadata["env"], raw)
        values.update(overrides)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        for f in fields(self):
            if "min" in f.metadata:
                _at_least(f.metadata["env"], getattr(self, f.name), f.metadata["min"])
        # Minimums that depend on another setting.
        _at_least("MAX_REPORT_BYTES", self.max_report_bytes, self.max_body_bytes)
        _at_least("REPORT_BYTES_IN_FLIGHT", self.report_bytes_in_flight, self.max_report_bytes)
        _at_least("SNS_RETRY_CAP_SECS", self.sns_retry_cap_secs, self.sns_retry_base_secs)
        if self.node_lost_secs:
            _at_least("NODE_LOST_SECS", self.node_lost_secs, self.node_ttl_secs)
        if self.job_retention_secs and self.scheduler_db == ":memory:":
            raise ConfigError(
                "JOB_RETENTION_SECS: needs a SCHEDULER_DB file (pruned jobs live on only there),"
                " not :memory:"
            )
        if not REDIS_PREFIX_CHARS.fullmatch(self.redis_prefix):
            raise ConfigError(
                f"REDIS_PREFIX: {self.redis_prefix!r} must be letters, digits and _ . : - only "
                "(the scheduler puts it in braces, a Redis Cluster hash tag)"
            )
        parse_redis_url(self.redis_url)
        self._validate_agent()

    def _validate_agent(self) -> None:
        if self.metrics not in ("on", "off"):
            raise ConfigError(f"METRICS: {self.metrics!r} is not one of on, off")
        if self.agent_auth not in ("open", "token"):
            raise ConfigError(f"AGENT_AUTH: {self.agent_auth!r} is not one of open, token")
        if self.agent_auth == "token" and not self.builtin_registry:
            raise ConfigError(
                "AGENT_AUTH: token needs the built-in registry (REGISTRY_URL unset), which "
                "issues the node tokens"
            )
        if self.agent_limits not in ("auto", "cgroup2", "cgroup1", "rlimit", "off"):
            raise ConfigError(
                f"AGENT_LIMITS: {self.agent_limits!r} is not one of auto, cgroup2, cgroup1, "
                "rlimit, off"
            )
        if self.agent_poll_wait_secs > 60:
            raise ConfigError(f"AGENT_POLL_WAIT_SECS: {self.agent_poll_wait_secs} is above 60")
        if not self.scheduler_url.startswith(("http://", "https://")):
            raise ConfigError(f"SCHEDULER_URL: {self.scheduler_url!r} is not an http(s) URL")


def redis_prefix_from_env(environ: Mapping[str, str]) -> str:
    """REDIS_PREFIX exactly as `Settings.from_env` reads it, without the other settings (the
    workers need it before they import rq). Raises ConfigError as from_env does."""
    return Settings.from_env({"REDIS_PREFIX": environ.get("REDIS_PREFIX", "")}).redis_prefix


# REDIS_URL. The forms (README, "Configuration"): redis://, rediss:// and unix:// as redis-py
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


def parse_redis_url(url: str) -> RedisTarget:
    """REDIS_URL as a typed target; ConfigError naming REDIS_URL when it does not parse."""
    try:
        return _parse_redis_url(url)
    except ValueError as exc:  # urllib's own errors (a bad port, say) too
        raise ConfigError(f"REDIS_URL: {_redact(url)!r}: {exc}") from None


def _parse_redis_url(url: str) -> RedisTarget:
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


def _redact(url: str) -> str:
    """The URL without its password, for error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    auth, _, hostspec = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{auth.partition(':')[0]}:***@{hostspec}").geturl()


def _at_least(name: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{name}: {value} is below the minimum {low}")


def _parse(kind: Callable[[str], T]) -> Callable[[str, str], T]:
    def parse(name: str, raw: str) -> T:
        try:
            value = kind(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}: {raw!r} is not a valid {kind.__name__}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: {raw!r} is not a finite number")
        return value

    return parse


def _text(_name: str, raw: str) -> str:
    return raw.strip()


_PARSERS: dict[Any, Callable[[str, str], Any]] = {
    "str": _text,
    "int": _parse(int),
    "float": _parse(float),
}
