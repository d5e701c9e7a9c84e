"""Settings: one typed object built from the environment.

Names follow the original scheduler where it has them (CONTRACT 2.1). As there, a variable set
to the empty string means the default. Unlike the original, a value that does not parse stops
the process at start with a message naming the variable, instead of silently running with a
default the operator did not ask for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from scheduler.config.errors import ConfigError as ConfigError
from scheduler.config.hosts import ANY_HOST as ANY_HOST
from scheduler.config.hosts import LOOPBACK_HOSTS as LOOPBACK_HOSTS
from scheduler.config.hosts import host_names as host_names
from scheduler.config.networks import NetworkListError, Networks, parse_networks
from scheduler.config.redis_url import RedisTarget, redact
from scheduler.config.redis_url import parse as parse_url
from scheduler.config.shards import MAX_SHARDS, shard_db, shard_prefixes
from scheduler.config.values import PARSERS, at_least, at_most

MiB = 1024 * 1024
# What a REDIS_PREFIX may hold: no braces (store/keys.py wraps it in a hash tag), no glob
# characters, and nothing rq refuses in its RQ_KEY_PREFIX (built from it).
REDIS_PREFIX_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str = field(default="redis://127.0.0.1:6379/0", metadata={"env": "REDIS_URL"})
    redis_prefix: str = field(default="sched", metadata={"env": "REDIS_PREFIX"})
    # The deployment's shards (store/shards.py, docs/ARCHITECTURE.md "Shards"): 1 is one
    # hash tag, the layout of every version before; more spread it over a Redis Cluster.
    shards: int = field(default=1, metadata={"env": "SCHEDULER_SHARDS", "min": 1})
    # The shard a worker serves (`scheduler worker` runs one per shard); set by for_shard.
    shard: int = field(default=0, metadata={"env": "SCHEDULER_SHARD", "min": 0})
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
    # The Host names the API answers, comma-separated (docs/SECURITY.md), besides the
    # loopback names and `serve`'s listen address: any other Host is 400, so a web page on a
    # name rebound to this machine's address (DNS rebinding) reads nothing. "*": any Host.
    allowed_hosts: str = field(default="", metadata={"env": "ALLOWED_HOSTS"})
    # 1: `scheduler serve` listens beyond loopback without TINYAWS_API_KEY, or there serves open
    # agent calls without AGENT_NETWORKS. Refused without (the names say why: cli/serve_checks.py).
    serve_insecure_no_key: int = field(
        default=0, metadata={"env": "SERVE_INSECURE_NO_KEY", "min": 0}
    )
    serve_insecure_open_agents: int = field(
        default=0, metadata={"env": "SERVE_INSECURE_OPEN_AGENTS", "min": 0}
    )
    # Who may make the agent calls (docs/SECURITY.md): "open" as the original (its Rust
    # agent sends no key), or "token": a node token from POST /nodes/register, or the key.
    agent_auth: str = field(default="open", metadata={"env": "AGENT_AUTH"})
    # A secret that only registers new node ids (token mode): agents hold it instead of the
    # key. Both need 128 bits where serve, worker and up start (config/secrets.py).
    agent_join_key: str = field(default="", metadata={"env": "AGENT_JOIN_KEY"})
    # Callers the agent routes answer (docs/SECURITY.md): comma-separated CIDRs; empty: any.
    agent_networks: str = field(default="", metadata={"env": "AGENT_NETWORKS"})
    # Load balancers whose X-Forwarded-For is believed (CIDRs); empty: none, the socket's
    # peer is the client (api/client_address.py).
    trusted_proxies: str = field(default="", metadata={"env": "TRUSTED_PROXIES"})
    # A selector all nodes match reads them all, ~3 µs each: 2,000 (docs/GUIDE.md, Placement).
    max_nodes: int = field(default=2_000, metadata={"env": "MAX_NODES", "min": 1})
    # A web UI login lasts this long from the login form (not renewed by use, ends at logout).
    ui_session_secs: float = field(
        default=12 * 3600.0, metadata={"env": "UI_SESSION_SECS", "min": 1}
    )
    # How often a UI page that changes by itself reloads (never while the reader is at it).
    ui_refresh_secs: float = field(default=5.0, metadata={"env": "UI_REFRESH_SECS", "min": 0.2})
    # How often each API process reads the named keys again when they changed (api/keyring.py):
    # a key made or revoked through another replica works, or stops, within this.
    keyring_refresh_secs: float = field(
        default=1.0, metadata={"env": "KEYRING_REFRESH_SECS", "min": 0.05}
    )
    # Wrong credentials one client address may send in a window from its first (api/guesses.py);
    # past them its wrong ones get 429 Retry-After until the window ends, right ones are served.
    auth_failures_max: int = field(default=10, metadata={"env": "AUTH_FAILURES_MAX", "min": 1})
    auth_failures_window_secs: float = field(
        default=300.0, metadata={"env": "AUTH_FAILURES_WINDOW_SECS", "min": 1}
    )
    # Prometheus metrics at /metrics and the request counting behind them: "on" or "off".
    metrics: str = field(default="on", metadata={"env": "METRICS"})
    # How often each API process adds its request counts to the deployment's (in Redis).
    metrics_flush_secs: float = field(
        default=1.0, metadata={"env": "METRICS_FLUSH_SECS", "min": 0.1}
    )
    # How long the dashboard's per-minute counts stay in Redis (its day view needs 86400).
    series_retention_secs: int = field(
        default=172800, metadata={"env": "SERIES_RETENTION_SECS", "min": 3600}
    )
    max_jobs_per_node: int = field(default=1, metadata={"env": "MAX_JOBS_PER_NODE", "min": 1})
    max_job_retries: int = field(default=1, metadata={"env": "MAX_JOB_RETRIES", "min": 0})
    # A retry waits this, doubled per retry made, up to the cap, with jitter (0: at once).
    retry_backoff_secs: int = field(default=0, metadata={"env": "RETRY_BACKOFF_SECS", "min": 0})
    retry_backoff_cap_secs: int = field(
        default=3600, metadata={"env": "RETRY_BACKOFF_CAP_SECS", "min": 1}
    )
    # How often the worker makes the due delayed jobs pending.
    promote_interval_secs: float = field(
        default=1.0, metadata={"env": "PROMOTE_INTERVAL_SECS", "min": 0.1}
    )
    job_timeout_secs: int = field(default=3600, metadata={"env": "JOB_TIMEOUT_SECS", "min": 1})
    # A cancelled running job's agent has this long to kill it and say so; then it is
    # cancelled anyway (the original agent cannot be told) and its node's slot is free.
    cancel_grace_secs: float = field(default=60.0, metadata={"env": "CANCEL_GRACE_SECS", "min": 1})
    node_ttl_secs: float = field(default=30.0, metadata={"env": "NODE_TTL_SECS", "min": 1})
    # "on": a node whose queue is empty takes jobs other nodes' polls left waiting
    # (docs/GUIDE.md, Work stealing); built-in registry only. "off": a job runs where placed.
    work_stealing: str = field(default="on", metadata={"env": "WORK_STEALING"})
    # 0: four times NODE_TTL_SECS (see node_lost_after).
    node_lost_secs: float = field(default=0.0, metadata={"env": "NODE_LOST_SECS", "min": 0})
    # How long a done or failed job stays in Redis after it finished; 0 keeps it forever (as
    # the original). Older ones live on in the SQLite snapshot only.
    job_retention_secs: float = field(default=0.0, metadata={"env": "JOB_RETENTION_SECS", "min": 0})
    output_limit_bytes: int = field(
        default=MiB, metadata={"env": "OUTPUT_LIMIT_BYTES", "min": 1024}
    )
    max_body_bytes: int = field(default=MiB, metadata={"env": "MAX_BODY_BYTES", "min": 1024})
    # A bulk submit's whole body (POST /jobs/batch), each of its jobs bound by MAX_BODY_BYTES
    # too: a thousand jobs of 16 KiB on average, not a thousand of 1 MiB.
    max_batch_bytes: int = field(default=16 * MiB, metadata={"env": "MAX_BATCH_BYTES"})
    max_report_bytes: int = field(default=64 * MiB, metadata={"env": "MAX_REPORT_BYTES"})
    # Report bytes one API process holds at once, counted as they arrive; past it, 503. Two
    # maximum-size reports: the Rust agent never retries a report (a refusal loses its result).
    # A report costs about twice its size while it is decoded (benchmarks/report_flood.py).
    report_bytes_in_flight: int = field(
        default=128 * MiB, metadata={"env": "REPORT_BYTES_IN_FLIGHT"}
    )
    max_page_bytes: int = field(default=32 * MiB, metadata={"env": "MAX_PAGE_BYTES", "min": 1024})
    # A request's head must be whole within this (api/deadline.py): a connection that sends
    # nothing, or half a head, is closed then, so strangers cannot hold sockets open for ever.
    head_timeout_secs: float = field(
        default=10.0, metadata={"env": "HEAD_TIMEOUT_SECS", "min": 0.1}
    )
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
    # How long a POST /jobs Idempotency-Key is remembered (Stripe's window).
    idempotency_ttl_secs: int = field(
        default=86400, metadata={"env": "IDEMPOTENCY_TTL_SECS", "min": 60}
    )
    # Live output (GET /jobs/{id}/logs): what Redis keeps of one job's, over its attempts; at
    # least one chunk (the agent's are 64 KiB at most), so the newest is never trimmed.
    log_max_bytes: int = field(
        default=1 << 20, metadata={"env": "LOG_MAX_BYTES", "min": 65536, "max": 64 << 20}
    )
    # ... and how long after its last chunk (the retention's prune takes it sooner).
    log_retain_secs: int = field(default=86400, metadata={"env": "LOG_RETAIN_SECS", "min": 60})
    # A follower's stream (logs?follow=1, /events) ends after this long; its client goes on
    # from its last event, maybe on another replica (so followers spread over replicas).
    follow_max_secs: float = field(default=600.0, metadata={"env": "FOLLOW_MAX_SECS", "min": 0})
    # GET /events: how long the stream of job events is kept to resume from (at most
    # models/event.py EVENTS_KEPT of them per shard, whatever their age).
    events_retain_secs: int = field(
        default=86400, metadata={"env": "EVENTS_RETAIN_SECS", "min": 60}
    )
    sqs_max_per_poll: int = field(default=1000, metadata={"env": "SQS_MAX_PER_POLL", "min": 1})
    outbox_flush_secs: float = field(default=1.0, metadata={"env": "OUTBOX_FLUSH_SECS", "min": 0.1})
    # Schedules (GUIDE.md, Schedules): how often a worker fires the due ones; how late a tick may
    # fire before it is missed (its catchup then decides); how many a deployment may hold.
    schedule_tick_secs: float = field(
        default=1.0, metadata={"env": "SCHEDULE_TICK_SECS", "min": 0.1}
    )
    schedule_grace_secs: float = field(
        default=60.0, metadata={"env": "SCHEDULE_GRACE_SECS", "min": 0}
    )
    max_schedules: int = field(default=100_000, metadata={"env": "MAX_SCHEDULES", "min": 1})
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
        default=20.0, metadata={"env": "AGENT_POLL_WAIT_SECS", "min": 0, "max": 60}
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
    # What the node offers jobs, sent at registration (issue 24): memory in MiB, 0 = the
    # machine's, or its cgroup's limit when lower (agent/capacity.py); labels `k=v,k2=v2`, checked
    # as the agent starts (cli/agent.py: the rule is models/labels.py's, not imported here).
    agent_memory_mb: int = field(default=0, metadata={"env": "AGENT_MEMORY_MB", "min": 0})
    agent_labels: str = field(default="", metadata={"env": "AGENT_LABELS"})
    agent_deploy_max_bytes: int = field(
        default=100 * MiB, metadata={"env": "AGENT_DEPLOY_MAX_BYTES", "min": 1024}
    )
    # A running job's output sent as it comes ("off": in its report only): agent/live_output.py.
    agent_live_output: str = field(default="on", metadata={"env": "AGENT_LIVE_OUTPUT"})
    agent_output_flush_secs: float = field(
        default=1.0, metadata={"env": "AGENT_OUTPUT_FLUSH_SECS", "min": 0}
    )
    agent_output_chunk_bytes: int = field(
        default=65536, metadata={"env": "AGENT_OUTPUT_CHUNK_BYTES", "min": 1024, "max": 65536}
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
    def agent_network_list(self) -> Networks:
        """AGENT_NETWORKS parsed (validate has checked that it parses); empty: any caller."""
        return parse_network_setting("AGENT_NETWORKS", self.agent_networks)

    @property
    def trusted_proxy_list(self) -> Networks:
        """TRUSTED_PROXIES parsed (validate has checked that it parses)."""
        return parse_network_setting("TRUSTED_PROXIES", self.trusted_proxies)

    @property
    def builtin_registry(self) -> bool:
        """With no REGISTRY_URL the scheduler is its own node registry."""
        return not self.registry_url

    @property
    def steals(self) -> bool:
        """Whether idle nodes take waiting jobs from other queues: placement's facts (labels,
        room, which nodes are registered) are the built-in registry's."""
        return self.work_stealing == "on" and self.builtin_registry

    def for_shard(self, shard: int) -> Settings:
        """Shard `shard` of this deployment: its prefix and snapshot file (config/shards.py)."""
        prefix = shard_prefixes(self.redis_prefix, self.shards)[shard]
        return replace(
            self, redis_prefix=prefix, scheduler_db=shard_db(self.scheduler_db, shard), shard=shard
        )

    def served(self) -> Settings:
        """The shard a worker serves (SCHEDULER_SHARD): of the deployment's settings, once."""
        return self.for_shard(self.shard)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f.metadata["env"], "")
            if raw != "":
                values[f.name] = PARSERS[f.type](f.metadata["env"], raw)
        values.update(overrides)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        for f in fields(self):
            if "min" in f.metadata:
                at_least(f.metadata["env"], getattr(self, f.name), f.metadata["min"])
            if "max" in f.metadata:
                at_most(f.metadata["env"], getattr(self, f.name), f.metadata["max"])
        # Minimums that depend on another setting.
        at_least("MAX_REPORT_BYTES", self.max_report_bytes, self.max_body_bytes)
        at_least("MAX_BATCH_BYTES", self.max_batch_bytes, self.max_body_bytes)
        at_least("REPORT_BYTES_IN_FLIGHT", self.report_bytes_in_flight, self.max_report_bytes)
        at_least("SNS_RETRY_CAP_SECS", self.sns_retry_cap_secs, self.sns_retry_base_secs)
        if self.node_lost_secs:
            at_least("NODE_LOST_SECS", self.node_lost_secs, self.node_ttl_secs)
        if self.job_retention_secs and self.scheduler_db == ":memory:":
            raise ConfigError(
                "JOB_RETENTION_SECS: needs a SCHEDULER_DB file (pruned jobs live on only there),"
                " not :memory:"
            )
        if self.shards > MAX_SHARDS:
            raise ConfigError(f"SCHEDULER_SHARDS: {self.shards} is above {MAX_SHARDS}")
        if self.shard >= self.shards:
            raise ConfigError(
                f"SCHEDULER_SHARD: {self.shard} is not below SCHEDULER_SHARDS ({self.shards})"
            )
        if not REDIS_PREFIX_CHARS.fullmatch(self.redis_prefix):
            raise ConfigError(
                f"REDIS_PREFIX: {self.redis_prefix!r} must be letters, digits and _ . : - only "
                "(the scheduler puts it in braces, a Redis Cluster hash tag)"
            )
        parse_redis_url(self.redis_url)
        host_names(self.allowed_hosts)
        if self.serve_insecure_no_key not in (0, 1):
            raise ConfigError(f"SERVE_INSECURE_NO_KEY: {self.serve_insecure_no_key} is not 0 or 1")
        self._validate_agent()
        parse_network_setting("AGENT_NETWORKS", self.agent_networks)
        parse_network_setting("TRUSTED_PROXIES", self.trusted_proxies)

    def _validate_agent(self) -> None:
        for name, switch in (
            ("METRICS", self.metrics),
            ("AGENT_LIVE_OUTPUT", self.agent_live_output),
            ("WORK_STEALING", self.work_stealing),
        ):
            if switch not in ("on", "off"):
                raise ConfigError(f"{name}: {switch!r} is not one of on, off")
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
        if not self.scheduler_url.startswith(("http://", "https://")):
            raise ConfigError(f"SCHEDULER_URL: {self.scheduler_url!r} is not an http(s) URL")


def redis_prefix_from_env(environ: Mapping[str, str]) -> str:
    """REDIS_PREFIX exactly as `Settings.from_env` reads it, without the other settings (the
    workers need it before they import rq). Raises ConfigError as from_env does."""
    return Settings.from_env({"REDIS_PREFIX": environ.get("REDIS_PREFIX", "")}).redis_prefix


def parse_redis_url(url: str) -> RedisTarget:
    """REDIS_URL as a typed target; ConfigError naming REDIS_URL when it does not parse."""
    try:
        return parse_url(url)
    except ValueError as exc:  # urllib's own errors (a bad port, say) too
        raise ConfigError(f"REDIS_URL: {redact(url)!r}: {exc}") from None


def parse_network_setting(name: str, raw: str) -> Networks:
    """A list of CIDRs (config/networks.py); ConfigError naming the variable when an item is
    not one."""
    try:
        return parse_networks(raw)
    except NetworkListError as exc:
        raise ConfigError(f"{name}: {exc}") from None
