"""Every store operation, each declared once (store/operation.py): a job's (jobs.py), the
listings' (listings.py), a node's and the registry's (nodes.py), the built-in registry's
services (services.py), the schedules' (schedules.py), watching jobs (logs.py: live output
and events) and the background work's (upkeep.py). A caller runs one through its store:
`await store.run(ops.jobs.cancel(job_id, now))` in the API,
`store.run(ops.upkeep.promote_due(now))` in a worker."""

from scheduler.store.ops import jobs, listings, logs, nodes, schedules, services, upkeep

__all__ = ["jobs", "listings", "logs", "nodes", "schedules", "services", "upkeep"]
