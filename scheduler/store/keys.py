"""Every Redis key of the scheduler, in one place.

Python code builds keys through `Keys`; Lua scripts receive `Keys.root` as KEYS[1] and derive
per-job and per-node keys through the functions of `LUA_KEY_FUNCTIONS`, which are generated
from the same templates below, so the two can never disagree.

Every key and channel starts with the hash tag "{P}" (P = REDIS_PREFIX, which may hold no
braces). Redis Cluster refuses a script whose keys lie in different slots, and ours derive keys
inside Lua (the poll walks a node's queue, a transition finds the job's node); a key's slot is
the hash of its tag alone, so the tag puts the whole deployment, rq's keys included, in one
slot. The cost: one deployment cannot spread over several cluster primaries; spreading load is
the sharding plan's job (several deployments, each its own tag). Before the tag, keys were
"P:..." and rq's "rq:..."; store/migrate.py renames such a deployment at start.

Layout (P = REDIS_PREFIX, T = the hash tag "{P}"):
  T:seq:job               counter, INCR gives the N of job-N
  T:seq:rr                counter, INCR gives the round-robin ticket
  T:seq:event             counter, INCR numbers the outbox events
  T:job:{id}              string, the job's wire JSON (exactly what GET /jobs/{id} returns)
  T:jobs                  zset of every job id, score N (listing, pagination)
  T:status:{status}       zset per status, score N
  T:node:{node}:jobs      zset of the node's jobs, score N
  T:node:{node}:{status}  zset per node and status, score N; :pending is the node's queue
  T:node:{node}:busy      set of the node's running run-jobs (MAX_JOBS_PER_NODE check)
  T:deadlines             zset of running run-jobs, score = start time (timeout sweep)
  T:finished              zset of finished jobs (done, failed, cancelled), score = finish time
  T:cancelling            zset of jobs asked to stop while running, score = when (the grace)
  T:dirty                 set of job ids changed since the last snapshot
  T:dirty:inflight        set of job ids the current (or a crashed) snapshot is writing
  T:initialised           marker: whether to restore from the SQLite snapshot is decided
  T:restoring             path of the SQLite file a restore is loading (absent otherwise)
  T:outbox                list of events to publish (SNS): "<event number> <message JSON>"
  T:nodes                 hash node id -> node JSON (built-in registry)
  T:nodes:seen            zset node id -> last heartbeat, epoch seconds
  T:nodes:compute         zset, the same for the nodes with role compute (placement); with
                          an external registry: when the sweep last saw each one healthy
  T:services              hash service id (svc-N) -> service JSON (built-in registry)
  T:seq:service           counter, INCR gives the N of svc-N
  T:node:{node}:services  zset of the node's services, score N (its list, its cap)
  T:nodes:token           hash node id -> SHA-256 (hex) of its agent token (built-in registry)
  T:tokens                hash token SHA-256 -> node id (whose token a bearer is)
  T:registry:readable-since  epoch s since the sweep has read the external registry without
                          a failure (deleted on a failure)
  T:sqs:{msg}             string, the job a SQS message created (idempotency key)
  T:lock:{name}           short-lived locks (restore, snapshot, worker promote)
  T:stats                 hash of background-work counters (workers/: sqs_dropped, ...)
  T:runs:{task}           list, the last runs of a periodic task: "<period> <epoch s>"
Pub/sub channels (not keys; named here all the same), published by the scripts:
  T:wake:node:{node}      the node may have work: a job was placed on it, or it has room again
  T:wake:job:{id}         the job changed
rq builds its own keys under RQ_KEY_PREFIX = T:rq (T:rq:queue:<name>, T:rq:job:<id>, ...;
workers/rq_prefix.py sets it) from the names below:
  queue  P.<kind>         the workers' queues (periodic, events)
  job id <p>-<kind>-<n>   p = the prefix in rq's id alphabet (a periodic run, an event)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Templates for keys that Lua derives; {0} is the single variable part.
_DERIVED = {
    "job": "job:{0}",
    "status": "status:{0}",
    "node_jobs": "node:{0}:jobs",
    "node_busy": "node:{0}:busy",
    "sqs_message": "sqs:{0}",
    "node_channel": "wake:node:{0}",
    "job_channel": "wake:job:{0}",
}


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str

    @property
    def tag(self) -> str:
        """The hash tag every key of the deployment starts with: its Redis Cluster slot."""
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

    def job(self, job_id: str) -> str:
        return self._k(_DERIVED["job"].format(job_id))

    def status(self, status: str) -> str:
        return self._k(_DERIVED["status"].format(status))

    def node_jobs(self, node_id: str) -> str:
        return self._k(_DERIVED["node_jobs"].format(node_id))

    def node_status(self, node_id: str, status: str) -> str:
        return self._k(f"node:{node_id}:{status}")

    def node_busy(self, node_id: str) -> str:
        return self._k(_DERIVED["node_busy"].format(node_id))

    def node_services(self, node_id: str) -> str:
        return self._k(f"node:{node_id}:services")

    def node_channel(self, node_id: str) -> str:
        """Published when the node may have work (long-polls of GET /jobs wait on it)."""
        return self._k(_DERIVED["node_channel"].format(node_id))

    def job_channel(self, job_id: str) -> str:
        """Published when the job changes (long-polls of GET /jobs/{id} wait on it)."""
        return self._k(_DERIVED["job_channel"].format(job_id))

    def sqs_message(self, dedup_key: str) -> str:
        return self._k(_DERIVED["sqs_message"].format(dedup_key))

    def lock(self, name: str) -> str:
        return self._k(f"lock:{name}")

    @property
    def stats(self) -> str:
        return self._k("stats")

    def runs(self, task: str) -> str:
        return self._k(f"runs:{task}")

    @property
    def rq_prefix(self) -> str:
        """rq's RQ_KEY_PREFIX for this deployment: rq's keys in the deployment's slot."""
        return self._k("rq")

    def rq_key(self, kind: str, name: str) -> str:
        """One of rq's keys, as rq running with `rq_prefix` names it (queue, job, scheduled,
        failed, wip, ...): for the upgrade and for tests, which may run another rq prefix."""
        return f"{self.rq_prefix}:{kind}:{name}"

    @property
    def rq_queues(self) -> str:
        """rq's set of every queue's key (what rq-dashboard lists)."""
        return f"{self.rq_prefix}:queues"

    def rq_queue(self, kind: str) -> str:
        """Name of an rq queue of this deployment (rq prefixes it into its own keys)."""
        return f"{self.prefix}.{kind}"

    def rq_job_id(self, kind: str, number: int) -> str:
        """An rq job id of this deployment; rq allows only [A-Za-z0-9_-] in ids."""
        return f"{_rq_tag(self.prefix)}-{kind}-{number}"

    def pattern(self) -> str:
        """SCAN pattern matching every key of this deployment (rq's included)."""
        return glob_escape(self.root) + "*"


def glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN/KEYS pattern (the tag's braces are plain, but a prefix of
    the old layout could hold any of *?[]\\)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


@dataclass(frozen=True, slots=True)
class LegacyKeys:
    """The names of the layout before the hash tag ("P:..." and rq's default "rq:..."), which
    only the upgrade (store/migrate.py, workers/rq_migrate.py) reads."""

    prefix: str

    @property
    def root(self) -> str:
        return f"{self.prefix}:"

    @property
    def initialised(self) -> str:
        return f"{self.root}initialised"

    def pattern(self) -> str:
        return glob_escape(self.root) + "*"

    def owns(self, key: str) -> bool:
        """Whether the old key `key` is this deployment's: another one, with the prefix
        "P:x", had its keys under "P:x:..." too."""
        return key.removeprefix(self.root).split(":", 1)[0] in LAYOUT_ROOTS

    def of(self, key: str, new: Keys) -> str:
        """The old name of the new key `key`."""
        return self.root + key.removeprefix(new.root)

    def renamed(self, key: str, new: Keys) -> str:
        """The new name of the old key `key` (which starts with this root)."""
        return new.root + key.removeprefix(self.root)

    @staticmethod
    def rq_prefix() -> str:
        return LEGACY_RQ_PREFIX

    @staticmethod
    def rq(kind: str, name: str) -> str:
        """One of rq's old keys: rq:queue:<queue>, rq:job:<id>, rq:scheduled:<queue>, ..."""
        return f"{LEGACY_RQ_PREFIX}:{kind}:{name}"

    @staticmethod
    def rq_queues() -> str:
        return f"{LEGACY_RQ_PREFIX}:queues"


# The first part of every key after the root (the layout above, rq's aside): the upgrade
# renames old keys with these only.
LAYOUT_ROOTS = frozenset(
    {
        "seq", "job", "jobs", "status", "node", "deadlines", "finished", "cancelling", "dirty",
        "initialised", "restoring", "outbox", "nodes", "services", "tokens", "registry", "sqs",
        "lock", "stats", "runs",
    }
)  # fmt: skip

# rq's RQ_KEY_PREFIX default, which the old layout ran with.
LEGACY_RQ_PREFIX = "rq"


def _rq_tag(prefix: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_-]+", prefix):
        return prefix
    # Two prefixes that only differ in characters rq refuses must not share job ids.
    digest = hashlib.sha1(prefix.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', prefix)}-{digest}"


def _lua_function(name: str, template: str) -> str:
    head, _, tail = template.partition("{0}")
    body = f'ROOT .. "{head}" .. x' + (f' .. "{tail}"' if tail else "")
    return f"local function key_{name}(x) return {body} end"


# The Lua function of each derived key, by name; KEYS[1] is Keys.root.
LUA_KEY_FUNCTIONS = {
    **{f"key_{name}": _lua_function(name, template) for name, template in _DERIVED.items()},
    "key_node_status": 'local function key_node_status(node, status) return ROOT .. "node:" '
    '.. node .. ":" .. status end',
}


def lua_key_functions(body: str) -> str:
    """What of LUA_KEY_FUNCTIONS a script's `body` needs: ROOT, and the functions it calls
    (they do not call each other)."""
    called = [
        definition
        for name, definition in LUA_KEY_FUNCTIONS.items()
        if re.search(rf"\b{name}\(", body)
    ]
    return "\n".join(("local ROOT = KEYS[1]", *called))
