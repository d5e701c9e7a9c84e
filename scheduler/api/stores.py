"""The store and the settings of the app serving a request, read back with their types.
Apart from state.py, which imports much of the api package, so that a module state.py
depends on (ui_session.py, through http.py) can read them too."""

from __future__ import annotations

from starlette.requests import Request

from scheduler.config import Settings
from scheduler.store.jobs import JobStore

# The store of the API: the executor of store operations over the deployment's shards.
Store = JobStore


def store(request: Request) -> Store:
    found: Store = request.app.state.store
    return found


def settings(request: Request) -> Settings:
    found: Settings = request.app.state.settings
    return found
