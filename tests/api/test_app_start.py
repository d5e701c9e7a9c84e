"""api/app.py: what the app says at start."""

from __future__ import annotations

import logging

import pytest

from scheduler.api.app import warn_if_agents_open
from scheduler.config import Settings
from tests.keys import API_KEY


@pytest.mark.parametrize(
    ("networks", "who"),
    [
        ("", "anyone who can reach this API can register nodes"),
        ("0.0.0.0/0", "anyone who can reach this API can register nodes"),
        ("10.20.0.0/16, 127.0.0.1", "anyone on AGENT_NETWORKS (10.20.0.0/16, 127.0.0.1) can"),
    ],
)
def test_the_open_agents_warning_names_who_it_means(
    caplog: pytest.LogCaptureFixture, networks: str, who: str
) -> None:
    """Issue 38: with AGENT_NETWORKS set, the warning said anyone could register nodes."""
    settings = Settings.from_env({"AGENT_NETWORKS": networks}, api_key=API_KEY)
    with caplog.at_level(logging.WARNING, logger="scheduler.api"):
        warn_if_agents_open(settings)
    assert who in caplog.text
