"""The poll's query parameters that are ours, not the original's (GET /jobs?node_id=N&
status=pending: docs/GUIDE.md, Work stealing), spelled once for the agent that sends them
(agent/remote.py) and the API that reads them (api/hot.py, the route table)."""

from __future__ import annotations

CAPACITY = "capacity"  # how many jobs the node runs at once (our agent's --max-jobs)
CLAIMS = "claims"  # CLAIMS=NAMED: the node's claims name it, so idle nodes may take its queue
NAMED = "named"
OURS = (CAPACITY, CLAIMS)
