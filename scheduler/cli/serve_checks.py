"""What `scheduler serve` checks before it listens (docs/SECURITY.md): who could reach what it
would serve. Two doors stay shut unless a setting whose name says it is insecure opens them:
listening beyond loopback without TINYAWS_API_KEY (`--insecure-no-key`), and, with a key,
serving the open agent calls (AGENT_AUTH=open) there to any network (`--insecure-open-agents`).
Serving on loopback without a key starts, with a WARNING: every local user is the operator."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from scheduler.config import Settings
from scheduler.config.networks import any_network

# How README makes one (32 random bytes: Must have 1's key strength).
MAKE_A_KEY = (
    "export TINYAWS_API_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


def loopback(host: str) -> bool:
    """Whether `serve --host` listens on this machine only."""
    name = host.strip("[]").lower()
    try:
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Exposure:
    """Where serve listens, what guards it, and which insecure overrides were asked for (the
    flag or its setting)."""

    host: str
    settings: Settings
    insecure_no_key: bool
    insecure_open_agents: bool

    @classmethod
    def of(cls, host: str, settings: Settings, no_key: bool, open_agents: bool) -> Exposure:
        return cls(
            host,
            settings,
            no_key or settings.serve_insecure_no_key == 1,
            open_agents or settings.serve_insecure_open_agents == 1,
        )

    @property
    def beyond_loopback(self) -> bool:
        return not loopback(self.host)

    @property
    def open_agents(self) -> bool:
        """The agent calls answer anyone who reaches the port: open mode, beyond loopback,
        no AGENT_NETWORKS, behind a key (without one, everything is open anyway)."""
        settings = self.settings
        return (
            bool(settings.api_key)
            and settings.agent_auth == "open"
            and any_network(settings.agent_network_list)
            and self.beyond_loopback
        )


def refusal(seen: Exposure) -> str:
    """Why serve must not start (""), naming what to set."""
    flag = seen.settings.serve_insecure_open_agents
    if flag not in (0, 1):
        return f"SERVE_INSECURE_OPEN_AGENTS: {flag} is not 0 or 1"
    if not seen.settings.api_key and seen.beyond_loopback and not seen.insecure_no_key:
        return (
            f"refusing to listen on {seen.host} without TINYAWS_API_KEY: anyone who reaches it "
            "could submit commands for the agents to run. Set TINYAWS_API_KEY (and "
            "AGENT_AUTH=token), listen on 127.0.0.1, or say --insecure-no-key "
            "(SERVE_INSECURE_NO_KEY=1) to serve without a key anyway"
        )
    if seen.open_agents and not seen.insecure_open_agents:
        return (
            f"refusing to serve the agent calls open (AGENT_AUTH=open) on {seen.host} to any "
            "network: anyone who reaches it could register a node and receive jobs with their "
            "env_vars, or claim pending ones. Set AGENT_AUTH=token (node tokens; the original "
            "Rust agent cannot send one), AGENT_NETWORKS to the agents' networks (CIDRs), or "
            "say --insecure-open-agents (SERVE_INSECURE_OPEN_AGENTS=1) to serve them anyway"
        )
    return ""


def warnings(seen: Exposure) -> list[str]:
    """What serve says at start, once it may start."""
    said = []
    if not seen.settings.api_key:
        who = "anyone who reaches it" if seen.beyond_loopback else "every local user"
        how = " (--insecure-no-key)" if seen.beyond_loopback else ""
        said.append(
            f"serving {seen.host} without a key{how}: {who} can submit commands for the agents "
            f"to run and read every job's env_vars. Set a key: {MAKE_A_KEY}"
        )
    if seen.open_agents:
        said.append(
            f"serving the agent calls open on {seen.host} to any network "
            "(--insecure-open-agents): anyone who reaches it can register a node and receive "
            "jobs with their env_vars"
        )
    return said
