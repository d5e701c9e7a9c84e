"""The schedules page (/ui/schedules): what a schedule does with the runs it missed, in words
(its `catchup`, models/schedule.py CATCHUP), not the policy's raw value."""

from __future__ import annotations

import re
from html import unescape

from starlette.testclient import TestClient

from scheduler.api.ui_schedules import CATCHUP_WORDS
from scheduler.models.schedule import CATCHUP


def test_the_catchup_policy_is_said_as_a_policy(client: TestClient) -> None:
    """The column is what a schedule does if runs are missed (its policy), not a count or a
    past: "skipped" on every row read as "its runs were skipped"."""
    for name, catchup in (("nightly", "skip"), ("ticker", "once")):
        body = {"name": name, "every_secs": 3600, "catchup": catchup, "job": {"command": "x"}}
        assert client.post("/schedules", json=body).status_code == 201
    page = client.get("/ui/schedules").text
    assert "<th>if runs are missed</th>" in page and "missed runs<" not in page
    said = {}
    for name in ("nightly", "ticker"):
        row = re.search(rf'<tr id="row-{name}">(.*?)</tr>', page, re.S)
        assert row, name
        cell = re.search(r'data-label="if runs are missed"[^>]*>(.*?)</td>', row.group(1), re.S)
        assert cell, name
        said[name] = unescape(re.sub(r"<[^>]+>", "", cell.group(1)))
        assert 'title="Runs it missed' in cell.group(1)  # what it does, on hover
    assert said == {"nightly": "skip them", "ticker": "run once"}


def test_every_policy_has_its_words() -> None:
    assert set(CATCHUP_WORDS) == set(CATCHUP)
