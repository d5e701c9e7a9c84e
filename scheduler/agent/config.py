"""The reference agent's configuration (`scheduler agent` builds it: cli/agent.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.agent.capacity import Offer

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node_id: str
    scheduler_url: str
    registry_url: str
    api_key: str = ""
    join_key: str = ""  # AGENT_JOIN_KEY: registers the node, nothing else
    poll_secs: float = 3.0
    poll_wait_secs: float = 0.0  # long-poll: the scheduler answers once there is work
    heartbeat_secs: float = 10.0
    grace_secs: float = 30.0
    max_jobs: int = 1
    http_timeout_secs: float = 5.0
    register_attempts: int = 11
    register_retry_secs: float = 2.0
    report_attempts: int = 5
    report_backoff_secs: float = 1.0
    # Where the node token is kept across restarts ("" = in memory only): a restarted agent
    # re-registers its live node with it (with AGENT_AUTH=token only the token or the API
    # key may).
    token_path: str = ""
    # What the node offers its jobs, sent at registration (capacity.py).
    offer: Offer = field(default_factory=Offer)
    # Logged once when the scheduler refuses the registration's key: which key it needs and
    # where to find it (cli/agent.py knows where `scheduler up` keeps its key).
    refused_hint: str = ""
    # Live output (live_output.py): a running job's stdout and stderr sent to the scheduler as
    # they come (AGENT_LIVE_OUTPUT), a stream once it holds output_chunk_bytes (at most 64 KiB,
    # the scheduler's bound) or output_flush_secs after its first unsent byte; at most
    # output_buffer_bytes of a stream wait unsent (the oldest dropped past it, a marker said).
    live_output: bool = True
    output_flush_secs: float = 1.0
    output_chunk_bytes: int = 65536
    output_buffer_bytes: int = MiB
