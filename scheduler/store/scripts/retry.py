"""Retries: the deployment's automatic retry rule, as the scripts that retry a job take it
(ARGV `max_retries backoff backoff_cap seed`; life.py `retries_left`, `retry_wait`; a job may
carry its own max_retries and retry_backoff_secs, which the scripts read first), and the
operator's retry by hand of failed jobs (RETRY_JOBS)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.config import Settings
from scheduler.models.job import MAX_WAITERS
from scheduler.nodes.placement import Placement
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.script import Call, Script

ARGV = "max_retries backoff backoff_cap seed"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int  # MAX_JOB_RETRIES
    backoff_secs: int  # RETRY_BACKOFF_SECS: 0, a retry at once (the original's)
    backoff_cap_secs: int  # RETRY_BACKOFF_CAP_SECS

    @classmethod
    def of(cls, settings: Settings) -> RetryPolicy:
        return cls(
            settings.max_job_retries, settings.retry_backoff_secs, settings.retry_backoff_cap_secs
        )

    def args(self, seed: float | None = None) -> dict[str, Any]:
        """The call's arguments; `seed` spreads the jitter of the jobs it retries (random
        unless a test fixes it)."""
        return {
            "max_retries": self.max_retries,
            "backoff": self.backoff_secs,
            "backoff_cap": self.backoff_cap_secs,
            "seed": random.random() if seed is None else seed,
        }


@dataclass(frozen=True, slots=True)
class Retried:
    """One job of a retry by hand: `code` OK (its record's head in `job`: the store puts its
    record together), NOT_FOUND, NOT_FAILED or NO_NODES."""

    job_id: str
    code: int
    job: bytes


def _retried(reply: list[Any]) -> list[Retried]:
    return [
        Retried(str(reply[i], "utf-8"), int(reply[i + 1]), reply[i + 2])
        for i in range(0, len(reply), 3)
    ]


RETRY_JOBS = Script(
    "RETRY_JOBS",
    "mode now node_ttl max_waiters units count *rest",
    """
-- POST /jobs/{id}/retry and POST /jobs/retry (the key): each failed job of the `count` ids
-- that open `rest` (whatever failed it: its command, a timeout, a lost node, a cancel)
-- starts over: pending on a node placed as a new job is (place.py pick_node; the candidates
-- are the rest of `rest`; an instance-bound job stays on its node; one no node takes now
-- waits unplaced with its pending_reason), its retry count, outputs and failure
-- cleared, out of the finished index. It has not ended, so no event. A job that runs after
-- others waits again for those not done (waiting), out of the unsettled endings of its
-- earlier wait (endings.py forget_earlier_waits); while one of them is failed it stays
-- failed (BLOCKED: retry that one first, in the same call before it), and while one is
-- waited for by `max_waiters` jobs already (TOO_MANY), as a new job would be refused.
-- The ids are taken in order while `units` last (a job costs ENDED_UNITS, its record's size
-- and placing, and DEPENDENCY_UNITS a job it runs after: endings.py), the first one always: the
-- caller sends the others again (store/jobs.py JobStore.retry). Returns {id, code, the
-- job's head or ""} per id taken, code OK | NOT_FOUND | NOT_FAILED | NO_NODES | BLOCKED |
-- TOO_MANY.
local ids, candidates = {}, {}
for i, value in ipairs(rest) do
  if i <= tonumber(count) then ids[#ids + 1] = value else candidates[#candidates + 1] = value end
end
local out, cutoff, left = {}, tonumber(now) - tonumber(node_ttl), tonumber(units)
for _, id in ipairs(ids) do
  if left <= 0 then break end
  local job, raw = load_job(id)
  local code, stored = OK, ""
  left = left - ENDED_UNITS - (raw and record_units(#raw) + placing_units(job) or 0)
  if not job then
    code = NOT_FOUND
  elseif job.status ~= "failed" then
    code = NOT_FAILED
  else
    local after = job.after or {}
    left = left - DEPENDENCY_UNITS * #after
    local target, reason = job.node_id, nil
    if (job.instance_id or "") == "" then
      target, reason = pick_node(mode, candidates, job, cutoff)
    end
    if failed_dependency(after) then
      code = BLOCKED
    elseif crowded_dependency(after, max_waiters, id) then
      code = TOO_MANY
    elseif not target and (mode ~= "live" or reason == REASON.no_nodes and not needs_fit(job)) then
      code = NO_NODES
    else
      job.retry_count = 0
      job.exit_code, job.failure_reason = nil, nil
      set_output(id, job, "stdout", nil)
      set_output(id, job, "stderr", nil)
      -- run_at: runnable from now, where the dashboard's wait to running counts from
      -- (minutes.py count_started), not from its first submit.
      job.running_at, job.finished_at, job.run_at = nil, nil, rfc3339(tonumber(now))
      forget_earlier_waits(id, after)
      local status = wait_for(id, after) > 0 and "waiting" or "pending"
      if status == "waiting" and needs_fit(job) then target = "" end  -- placed when done
      rebind(id, number_of(id), job, status, target or "")
      if status == "pending" and not target then job.pending_reason = reason end
      stored = store_job(id, job)
    end
  end
  out[#out + 1], out[#out + 2], out[#out + 3] = id, code, stored
end
return out
""",
    _retried,
)


def retry_jobs(
    job_ids: Sequence[str], placement: Placement, now: float, node_ttl: float
) -> Call[list[Retried]]:
    """The failed jobs of the first of `job_ids` pending again, placed by `placement` (a new
    job's): as many as one call's bounded work takes (at least one), in order; the answer
    says which, and the caller sends the others again."""
    return RETRY_JOBS.call(
        mode=placement.mode,
        now=now,
        node_ttl=node_ttl,
        max_waiters=MAX_WAITERS,
        units=SETTLE_UNITS,
        count=len(job_ids),
        rest=[*job_ids, *placement.candidates],
    )
