"""What create_app and its lifespan keep on app.state, read back with its type."""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request

from scheduler.api.agents import AgentAuth, ReportBudget
from scheduler.api.guesses import Credentials
from scheduler.api.stores import Store
from scheduler.api.stores import settings as settings
from scheduler.api.stores import store as store
from scheduler.api.upgrade import OldLayoutWatch
from scheduler.config import Settings
from scheduler.nodes.registry import NodeSource


def agent_auth(request: Request) -> AgentAuth:
    found: AgentAuth = request.app.state.agent_auth
    return found


def credentials(request: Request) -> Credentials:
    found: Credentials = request.app.state.credentials
    return found


def node_source(request: Request) -> NodeSource:
    found: NodeSource = request.app.state.nodes
    return found


def old_layout(request: Request) -> OldLayoutWatch:
    found: OldLayoutWatch = request.app.state.old_layout
    return found


class AppState(Protocol):
    """app.state as the hot calls (hot.py) read it: the lifespan sets store and nodes."""

    settings: Settings
    store: Store
    nodes: NodeSource
    agent_auth: AgentAuth
    report_budget: ReportBudget
    credentials: Credentials
