"""The Redis keys of teams (docs/GUIDE.md, Teams): named keys and the audit, namespaces' indexes
and what they keep. `Keys` (keys.py) inherits them: every key is still a member of `Keys`, built
from its root, and named `K.<name>` in the scripts (lua_keys.py reads `Keys`' members)."""

from __future__ import annotations


class TeamKeys:
    __slots__ = ()

    def _k(self, suffix: str) -> str:  # keys.py Keys._k: the key under the deployment's root
        raise NotImplementedError

    # A namespace's jobs (models/namespace.py; "" names the default's), by number, and by
    # status: GET /jobs?namespace=, the counts and quotas of one namespace.
    def namespace_jobs(self, namespace: str) -> str:
        return self._k(f"ns:{namespace}:jobs")

    def namespace_status(self, namespace: str, status: str) -> str:
        return self._k(f"ns:{namespace}:{status}")

    # Every other namespace than the default holding a job, so /metrics counts each without
    # a SCAN: CREATE_JOB, RESTORE_JOBS and the upgrade's INDEX_NAMESPACES add, PRUNE_FINISHED
    # removes an emptied one. The default's ("") is always counted and never added (a
    # command less on the usual create); readers pass over it where an earlier version did.
    @property
    def namespaces(self) -> str:
        return self._k("namespaces")

    @property
    def namespaces_indexed(self) -> str:  # set once the jobs of before namespaces are indexed
        return self._k("namespaces:indexed")

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

    # Quotas (docs/GUIDE.md, Quotas). The namespaces' quotas: namespace (as stored) -> its
    # limits as JSON (models/quota.py Quota); none at all: no quota anywhere, what every
    # claim checks first (one EXISTS).
    @property
    def quotas(self) -> str:
        return self._k("ns:quotas")

    @property
    def quotas_changes(self) -> str:  # hash: made (moved by every change), written (snapshot's)
        return self._k("ns:quotas:changes")

    @property
    def quota_freed(self) -> str:  # set: namespaces whose over_quota jobs may fit now
        return self._k("ns:freed")

    def namespace_held(self, namespace: str) -> str:  # hash: cpus, memory_mb its running hold
        return self._k(f"ns:{namespace}:held")

    def over_quota(self, namespace: str) -> str:  # zset: its jobs waiting for quota, queue order
        return self._k(f"ns:{namespace}:over-quota")
