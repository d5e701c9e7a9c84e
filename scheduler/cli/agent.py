"""`scheduler agent`: the reference agent's command line and settings (the agent itself:
scheduler/agent/)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import tempfile
from pathlib import Path

import httpx

from scheduler.agent import token_file
from scheduler.agent.capacity import Offer, memory_offer_mb
from scheduler.agent.config import AgentConfig
from scheduler.agent.executor import ExecConfig, Executor
from scheduler.agent.limits import Limits, detect
from scheduler.agent.loop import Agent
from scheduler.agent.remote import AgentError
from scheduler.client import session
from scheduler.config import ConfigError, Settings
from scheduler.models.labels import parse_labels
from scheduler.models.wire import ID_RE, InvalidInput

log = logging.getLogger("scheduler.agent")

MiB = 1024 * 1024


def default_node_id() -> str:
    host = socket.gethostname()
    return host if ID_RE.fullmatch(host) else "local-agent"


def offer(settings: Settings) -> Offer:
    """What the node offers its jobs: every CPU, AGENT_MEMORY_MB or the memory found
    (capacity.memory_offer_mb), AGENT_LABELS."""
    try:
        labels = parse_labels(settings.agent_labels)
    except InvalidInput as exc:
        raise ConfigError(f"AGENT_LABELS: {exc}") from None
    memory_mb = memory_offer_mb(settings.agent_memory_mb)
    return Offer(cpus=os.cpu_count() or 1, memory_mb=memory_mb, labels=labels)


def with_up_key(settings: Settings, url: str) -> tuple[Settings, str]:
    """`settings` with the key of the `scheduler up` session at `url` when neither
    TINYAWS_API_KEY nor AGENT_JOIN_KEY is set (so `scheduler agent --node-id gpu-1` beside
    `up` is one command, as the client's), and what to say when the scheduler refuses the
    agent's registration: which key it needs, and where `up` keeps it."""
    path = session.key_path(url)
    where = f"`scheduler up` keeps its key in {path}" if path else "`scheduler up` keeps none"
    if settings.agent_join_key:
        return settings, f"the scheduler at {url} refused AGENT_JOIN_KEY: set it to the API's"
    if settings.api_key:
        return settings, (
            f"the scheduler at {url} refused TINYAWS_API_KEY: set it to the scheduler's key "
            f"(beside `scheduler up`, unset it: {where}, which this agent reads)"
        )
    found = session.with_session_key(settings, url)
    if found.api_key:
        log.info("using the key of the `scheduler up` session at %s (%s)", url, path)
        return found, (
            f"the scheduler at {url} refused the key of the `scheduler up` session ({path}): "
            "is that `up` still the one running there?"
        )
    return settings, (
        f"the scheduler at {url} asks for a key and this agent has none: set TINYAWS_API_KEY "
        f"to its key, or AGENT_JOIN_KEY to its join key. {where} while it runs, which this "
        f"agent reads when SCHEDULER_URL is up's address: is `up` running at {url}?"
    )


def build(args: argparse.Namespace, settings: Settings) -> tuple[AgentConfig, ExecConfig]:
    named = args.node_id or settings.agent_node_id
    node_id = named or default_node_id()
    if not ID_RE.fullmatch(node_id):
        raise ConfigError(f"node id {node_id!r}: use 1 to 128 of A-Z a-z 0-9 . _ -")
    scheduler_url = args.scheduler_url or settings.scheduler_url
    keyed, refused_hint = with_up_key(settings, scheduler_url)
    if not named and keyed.api_key and not settings.api_key:
        # Beside `up` (its session key taken), whose own agent is the machine's default id:
        # a second agent of that id would share its queue, and stopping either drains it.
        raise ConfigError(
            f"`scheduler up` at {scheduler_url} runs its own agent as node {node_id}: give "
            "this one an id of its own, --node-id NAME"
        )
    settings = keyed
    work_dir = settings.agent_work_dir or os.path.join(tempfile.gettempdir(), "tinyaws-agent")
    config = AgentConfig(
        node_id=node_id,
        scheduler_url=scheduler_url,
        registry_url=args.registry_url or settings.registry_url or scheduler_url,
        api_key=settings.api_key,
        join_key=settings.agent_join_key,
        poll_secs=settings.agent_poll_secs,
        poll_wait_secs=settings.agent_poll_wait_secs,
        heartbeat_secs=settings.agent_heartbeat_secs,
        grace_secs=settings.agent_grace_secs,
        max_jobs=args.max_jobs or settings.max_jobs_per_node,
        http_timeout_secs=settings.http_timeout_secs,
        token_path=str(token_file.default_path(settings.agent_work_dir, node_id)),
        offer=offer(settings),
        refused_hint=refused_hint,
        live_output=settings.agent_live_output == "on",
        output_flush_secs=settings.agent_output_flush_secs,
        output_chunk_bytes=settings.agent_output_chunk_bytes,
    )
    try:
        backend = detect(settings.agent_limits)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    run_mb, svc_mb = settings.agent_run_memory_mb, settings.agent_service_memory_mb
    exec_config = ExecConfig(
        work_dir=Path(work_dir) / node_id,
        backend=backend,
        run_limits=Limits(run_mb * MiB, settings.agent_run_cpus),
        service_limits=Limits(svc_mb * MiB, settings.agent_service_cpus),
        output_limit=settings.output_limit_bytes,
        # Later than the scheduler's sweep, which fails the job without a retry: the agent's
        # own `failed` would be retried. This kill only stops work that nobody waits for.
        timeout_secs=settings.job_timeout_secs + 2 * settings.sweep_interval_secs + 5,
        deploy_max_bytes=settings.agent_deploy_max_bytes,
    )
    return config, exec_config


async def run_agent(config: AgentConfig, exec_config: ExecConfig) -> int:
    timeout = httpx.Timeout(config.http_timeout_secs)
    async with (
        httpx.AsyncClient(timeout=timeout) as http,
        httpx.AsyncClient(timeout=timeout, follow_redirects=True) as downloads,
    ):
        agent = Agent(config, Executor(exec_config, downloads), http)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, agent.stop)
        log.info(
            "agent %s: scheduler %s, registry %s, limits %s, up to %d jobs, offers %d cpus "
            "and %d MiB, labels %s",
            config.node_id,
            config.scheduler_url,
            config.registry_url,
            exec_config.backend.name,
            config.max_jobs,
            config.offer.cpus,
            config.offer.memory_mb,
            ",".join(f"{k}={v}" for k, v in config.offer.labels.items()) or "none",
        )
        try:
            await agent.run()
        except AgentError as exc:
            log.error("%s", exc)
            return 0 if agent.stopping.is_set() else 1
    return 0


def _handler(args: argparse.Namespace, settings: Settings) -> int:
    try:
        config, exec_config = build(args, settings)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return 2
    return asyncio.run(run_agent(config, exec_config))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = sub.add_parser("agent", help="run the reference compute agent on this machine")
    agent.add_argument("--node-id", default="", help="node id (default: $AGENT_NODE_ID, hostname)")
    agent.add_argument("--scheduler-url", default="", help="default: $SCHEDULER_URL")
    agent.add_argument(
        "--registry-url", default="", help="default: $REGISTRY_URL, else the scheduler's"
    )
    agent.add_argument(
        "--max-jobs", type=int, default=0, help="jobs at once (default: $MAX_JOBS_PER_NODE)"
    )
    agent.set_defaults(handler=_handler)
