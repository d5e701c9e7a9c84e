"""Every Redis key of the scheduler, in one place.

Python code builds keys through `Keys`; a Lua script receives `Keys.root` as KEYS[1], its only
key, and names every other key `K.<name>` after the `Keys` member of that name (`K.deadlines`,
`K.job(id)`, `K.node_status(node, status)`): `lua_keys` (lua_keys.py) writes the Lua of each
from the member itself, so the two can never disagree.

Every key and channel starts with the hash tag "{P}" (P = REDIS_PREFIX, which may hold no
braces). Redis Cluster refuses a script whose keys lie in different slots, and ours derive keys
inside Lua (the poll walks a node's queue, a transition finds the job's node); a key's slot is
the hash of its tag alone, so the tag puts a shard, rq's keys included, in one slot; a
deployment spreads over primaries as shards, each a `Keys` of its own (shards.py). Before the
tag, keys were "P:..." and rq's "rq:..." (legacy_keys.py); store/migrate.py renames such a
layout at start. The layout is docs/ARCHITECTURE.md's "Redis keys" table (a key added here gets
its row there); rq builds its own keys under RQ_KEY_PREFIX = T:rq (workers/rq_prefix.py sets it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str

    @property
    def tag(self) -> str:  # the hash tag every key of the deployment starts with: its slot
        return "{" + self.prefix + "}"

    @property
    def root(self) -> str:
        return f"{self.tag}:"

    def _k(self, suffix: str) -> str:
        return f"{self.root}{suffix}"

    @property
    def job_seq(self) -> str:
        return self._k("seq:job")

    @property
    def rr_seq(self) -> str:
        return self._k("seq:rr")

    @property
    def event_seq(self) -> str:
        return self._k("seq:event")

    @property
    def all_jobs(self) -> str:
        return self._k("jobs")

    @property
    def deadlines(self) -> str:
        return self._k("deadlines")

    @property
    def cancelling(self) -> str:
        return self._k("cancelling")

    @property
    def delayed(self) -> str:
        return self._k("delayed")

    @property
    def waiting(self) -> str:  # hash: a waiting job's id -> how many it waits for, not done
        return self._k("waiting")

    def dependents(self, job_id: str) -> str:  # set: the waiting jobs that run after it
        return self._k(f"dependents:{job_id}")

    @property
    def endings(self) -> str:  # zset, scores 0: the endings whose waiters are still to settle
        return self._k("endings")

    def ending_waiters(self, number: str) -> str:  # set: those of the ending of event `number`
        return self._k(f"endings:{number}")

    @property
    def finished(self) -> str:
        return self._k("finished")

    @property
    def dirty(self) -> str:
        return self._k("dirty")

    @property
    def dirty_inflight(self) -> str:
        return self._k("dirty:inflight")

    @property
    def initialised(self) -> str:
        return self._k("initialised")

    @property
    def restoring(self) -> str:
        return self._k("restoring")

    @property
    def outbox(self) -> str:
        return self._k("outbox")

    @property
    def nodes(self) -> str:
        return self._k("nodes")

    @property
    def nodes_seen(self) -> str:
        return self._k("nodes:seen")

    @property
    def nodes_compute(self) -> str:
        return self._k("nodes:compute")

    @property
    def nodes_load(self) -> str:
        return self._k("nodes:load")

    @property
    def drained_nodes(self) -> str:
        return self._k("nodes:drained")

    @property
    def backlog(self) -> str:  # zset: node -> jobs its last poll left waiting (work stealing)
        return self._k("nodes:backlog")

    @property
    def nodes_vouched(self) -> str:  # set: nodes the operator vouched for (their node.hostname)
        return self._k("nodes:vouched")

    def node_room(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:room")

    def nodes_offer(self, what: str) -> str:  # zset: each compute node's offer of cpus, memory_mb
        return self._k(f"nodes:offer:{what}")

    def nodes_free(self, what: str) -> str:  # zset: its offer less what its jobs hold, per node
        return self._k(f"nodes:free:{what}")

    def node_held(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:held")

    def label_nodes(self, label: str) -> str:  # set: the compute nodes with label `key=value`
        return self._k(f"label:{label}")

    @property
    def unplaced(self) -> str:
        return self._k("unplaced")

    @property
    def unplaced_retry(self) -> str:
        return self._k("unplaced:retry")

    @property
    def drained_changes(self) -> str:
        return self._k("nodes:drained:changes")

    @property
    def services(self) -> str:
        return self._k("services")

    @property
    def service_seq(self) -> str:
        return self._k("seq:service")

    @property
    def node_tokens(self) -> str:
        return self._k("nodes:token")

    @property
    def tokens(self) -> str:
        return self._k("tokens")

    @property
    def registry_readable_since(self) -> str:
        return self._k("registry:readable-since")

    @property
    def schedules(self) -> str:
        return self._k("schedules")

    @property
    def schedule_names(self) -> str:
        return self._k("schedules:names")

    @property
    def schedules_due(self) -> str:
        return self._k("schedules:due")

    @property
    def schedules_dirty(self) -> str:
        return self._k("schedules:dirty")

    @property
    def schedules_dirty_inflight(self) -> str:
        return self._k("schedules:dirty:inflight")

    def schedule_jobs(self, name: str) -> str:  # zset: the jobs schedule `name` made, by N
        return self._k(f"schedules:{name}:jobs")

    @property
    def shards(self) -> str:  # on shard 0: the shard count and the upgrade's floors (shards.py)
        return self._k("shards")

    @property
    def records_split(self) -> str:
        return self._k("records:split")

    def job(self, job_id: str) -> str:
        return self._k(f"job:{job_id}")

    def staged(self, token: str) -> str:
        return self._k(f"staged:{token}")

    def job_spec(self, job_id: str) -> str:
        return self._k(f"job:{job_id}:spec")

    def job_output(self, job_id: str, stream: str) -> str:
        return self._k(f"job:{job_id}:{stream}")

    def attempts(self, job_id: str) -> str:
        return self._k(f"attempts:{job_id}")

    def job_log(self, job_id: str) -> str:  # stream: its output sent while it ran, capped
        return self._k(f"log:{job_id}")

    def job_log_state(self, job_id: str) -> str:  # hash: its run, offsets, bytes held, dropped
        return self._k(f"log:{job_id}:state")

    @property
    def events(self) -> str:  # stream: every job's status changes, for GET /events
        return self._k("events")

    def status(self, status: str) -> str:
        return self._k(f"status:{status}")

    # A namespace's jobs (models/namespace.py; "" names the default's), by number, and by
    # status: GET /jobs?namespace=, the counts and quotas of one namespace.
    def namespace_jobs(self, namespace: str) -> str:
        return self._k(f"ns:{namespace}:jobs")

    def namespace_status(self, namespace: str, status: str) -> str:
        return self._k(f"ns:{namespace}:{status}")

    # Quotas (docs/GUIDE.md, Quotas). The namespaces' quotas: namespace (as stored) -> its
    # limits as JSON (models/namespace.py Quota); none at all: no quota anywhere, what every
    # claim checks first (one EXISTS).
    @property
    def quotas(self) -> str:
        return self._k("ns:quotas")

    @property
    def quotas_changes(self) -> str:  # hash: made (moved by every change), written (snapshot's)
        return self._k("ns:quotas:changes")

    @property
    def namespaces(self) -> str:  # set: the namespaces other than the default that hold jobs
        return self._k("ns:known")

    @property
    def quota_freed(self) -> str:  # set: namespaces whose over_quota jobs may fit now
        return self._k("ns:freed")

    def namespace_held(self, namespace: str) -> str:  # hash: cpus, memory_mb its running hold
        return self._k(f"ns:{namespace}:held")

    def over_quota(self, namespace: str) -> str:  # zset: its jobs waiting for quota, queue order
        return self._k(f"ns:{namespace}:over-quota")

    def node_jobs(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:jobs")

    def node_status(self, node_id: str, status: str) -> str:
        return self._k(f"node:{node_id}:{status}")

    def node_busy(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:busy")

    def node_services(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:services")

    def node_channel(self, node_id: str) -> str:  # published when the node may have work
        return self._k(f"wake:node:{node_id}")

    def job_channel(self, job_id: str) -> str:  # published when the job changes
        return self._k(f"wake:job:{job_id}")

    def log_channel(self, job_id: str) -> str:  # published when its output grows
        return self._k(f"wake:log:{job_id}")

    @property
    def backlog_channel(self) -> str:  # published when a node's queue is left waiting
        return self._k("wake:backlog")

    @property
    def events_channel(self) -> str:  # published when an event is added
        return self._k("wake:events")

    def sqs_message(self, dedup_key: str) -> str:
        return self._k(f"sqs:{dedup_key}")

    def submission(self, idempotency_key: str) -> str:
        return self._k(f"submit:{idempotency_key}")

    def batch_submission(self, idempotency_key: str) -> str:
        """A bulk submit's Idempotency-Key (its digest): the fingerprint of the batch that
        took it. Among the submissions (no digest starts with `batch:`)."""
        return self._k(f"submit:batch:{idempotency_key}")

    def lock(self, name: str) -> str:
        return self._k(f"lock:{name}")

    def ui_session(self, session_hash: str) -> str:  # a login: the SHA-256 of its cookie, TTL'd
        return self._k(f"ui:session:{session_hash}")

    @property
    def ui_secret(self) -> str:  # the deployment's random secret: the no-key UI's CSRF HMAC key
        return self._k("ui:secret")

    @property
    def api_keys(self) -> str:  # hash: a named key's name -> its record (models/access_key.py)
        return self._k("apikeys")

    @property
    def api_keys_version(self) -> str:  # counter: bumped by every change of api_keys
        return self._k("apikeys:version")

    @property
    def api_keys_written(self) -> str:  # the version the snapshot file's api_keys table holds
        return self._k("apikeys:written")

    @property
    def audit(self) -> str:  # stream: the admin calls, who made them and on what
        return self._k("audit")

    @property
    def audit_written(self) -> str:  # the id of the newest audit entry the snapshot file holds
        return self._k("audit:written")

    def auth_failures(self, address: str) -> str:
        """Counter, with the window's TTL: failed logins and bearer keys from one address."""
        return self._k(f"authfail:{address}")

    def series(self, minute: int) -> str:
        """Hash, with SERIES_RETENTION_SECS' TTL: the dashboard's counts of one minute."""
        return self._k(f"series:{minute}")

    @property
    def series_retention(self) -> str:
        """String: SERIES_RETENTION_SECS, for the scripts that set a minute's expiry."""
        return self._k("series-retention")

    @property
    def stats(self) -> str:
        return self._k("stats")

    @property
    def libraries(self) -> str:
        """The scripts' function libraries in use: name -> when a process last said so."""
        return self._k("libraries")

    @property
    def request_stats(self) -> str:
        return self._k("stats:requests")

    def runs(self, task: str) -> str:
        return self._k(f"runs:{task}")

    @property
    def rq_prefix(self) -> str:
        """rq's RQ_KEY_PREFIX for this deployment: rq's keys in the deployment's slot."""
        return self._k("rq")

    def rq_key(self, kind: str, name: str) -> str:
        """One of rq's keys as rq names it under `rq_prefix` (for the upgrade and tests)."""
        return f"{self.rq_prefix}:{kind}:{name}"

    @property
    def rq_queues(self) -> str:  # rq's set of every queue's key (what rq-dashboard lists)
        return f"{self.rq_prefix}:queues"

    def rq_queue(self, kind: str) -> str:  # an rq queue's name (rq prefixes it in its keys)
        return f"{self.prefix}.{kind}"

    def rq_job_id(self, kind: str, number: int) -> str:  # rq allows [A-Za-z0-9_-] in ids
        return f"{_rq_tag(self.prefix)}-{kind}-{number}"

    def pattern(self) -> str:
        """SCAN pattern matching every key of this deployment (rq's included)."""
        return glob_escape(self.root) + "*"


# The Keys member that remembers an idempotency key of each space (scripts/create.py
# Dedup.space); any other space's is a POST /jobs Idempotency-Key's. Dedup.redis_key reads
# it, and the scripts' Lua (generated.py dedup_key_of) is written from it: one choice for both.
SPACE_KEYS: dict[str, Callable[[Keys, str], str]] = {"sqs": Keys.sqs_message}
OTHER_SPACE_KEY = Keys.submission


def glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN/KEYS pattern (an old layout's prefix may hold *?[]\\)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _rq_tag(prefix: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_-]+", prefix):
        return prefix
    # Two prefixes that only differ in characters rq refuses must not share job ids.
    digest = hashlib.sha1(prefix.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', prefix)}-{digest}"
