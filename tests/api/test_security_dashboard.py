"""The dashboard, /ui (issue 28), tried as an attacker would, over HTTP against `scheduler
serve`'s protocol on a real Redis: reading the deployment's figures without a session, markup
or out-of-range values in its window, a window of the caller's choosing to make Redis read
more, and the page as a way to write. Each is refused, or shown as text, and leaves Redis as
it was (the request metrics, sessions and the UI's secret aside: the test's own calls)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
import redis

from scheduler.api.http import UI_COOKIE
from scheduler.api.ui_headers import with_script
from scheduler.api.ui_refresh import page_script
from tests.api.test_security_ui_pages import MARKUP, redis_state, shown_as_text
from tests.conftest import Serve

KEY = "dashboard-key"


@pytest.fixture
def api(serve: Serve) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serve(api_key=KEY), follow_redirects=False) as client:
        key = {"Authorization": f"Bearer {KEY}"}
        assert client.post("/nodes/register", json={"id": "n1"}, headers=key).status_code == 201
        job = client.post("/jobs", json={"command": "echo secret"}, headers=key).json()
        assert client.patch(f"/jobs/{job['job_id']}", json={"status": "running"}).is_success
        yield client


def logged_in(api: httpx.Client) -> httpx.Client:
    assert api.post("/ui/login", data={"key": KEY}).status_code == 303
    return api


def test_the_figures_need_a_session(api: httpx.Client, rclient: redis.Redis, prefix: str) -> None:
    before = redis_state(rclient, prefix)
    attempts = [
        {},
        {"headers": {"Authorization": f"Bearer {KEY}"}},  # the key as a bearer: not a session
        {"headers": {"Cookie": f"{UI_COOKIE}={'0' * 64}"}},  # a forged cookie
    ]
    for tried in attempts:
        for window in ("", "day"):
            answer = api.get("/ui", params={"window": window} if window else {}, **tried)
            assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")
            assert 'id="flow"' not in answer.text and "n1" not in answer.text
    assert redis_state(rclient, prefix) == before
    page = logged_in(api).get("/ui")
    assert page.status_code == 200 and 'id="flow"' in page.text and "n1" in page.text


def test_markup_or_a_window_of_ones_own_is_a_400_that_repeats_none_of_it(
    api: httpx.Client, rclient: redis.Redis, prefix: str
) -> None:
    logged_in(api)
    before = redis_state(rclient, prefix)
    hsets = commands(rclient)
    for window in (MARKUP, "week", "100000", "-1", "HOUR", "hour ", ""):
        answer = api.get("/ui", params={"window": window})
        if window == "":
            assert answer.status_code == 200  # empty: the hour
            continue
        assert answer.status_code == 400, window
        assert "invalid window: use window=day" in answer.text
        shown_as_text(answer)
    assert api.get("/ui?window=day&window=hour").status_code == 400  # given twice
    # Not a parameter of the page: ignored, the hour is drawn.
    other = api.get("/ui?minutes=100000&from=0").text
    assert other.count('<rect class="col"') == 3 * 60
    assert redis_state(rclient, prefix) == before
    # No read of a series past the window's 1440 minutes happened for any of them.
    assert commands(rclient) - hsets <= 2 * 1440


def commands(rclient: redis.Redis) -> int:
    """HGETALLs Redis has run (the dashboard reads a minute with one)."""
    stats = rclient.info("commandstats").get("cmdstat_hgetall", {"calls": 0})
    return int(stats["calls"])


def test_reading_the_dashboard_writes_nothing_and_it_takes_no_post(
    api: httpx.Client, rclient: redis.Redis, prefix: str
) -> None:
    logged_in(api)
    before = redis_state(rclient, prefix)
    for path in ("/ui", "/ui?window=day", "/ui?refresh=off"):
        page = api.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        # No script but the refresh's (ui_refresh.py), named by its hash; none when paused.
        refresh = page_script(path != "/ui?refresh=off", "")
        scripts = re.findall(r"<script>(.*?)</script>", page.text, re.S)
        assert scripts == ([refresh] if refresh else []), path
        if refresh:
            assert page.headers["content-security-policy"] == with_script(refresh)
        assert re.search(r'data-running="1"', page.text)  # the drawn figures, read only
    # A form of another site, or a script's POST: refused before the page (a GET only).
    for headers in ({"Origin": "https://evil.example"}, {}):
        answer = api.post("/ui", data={"window": "day"}, headers=headers)
        assert answer.status_code in (403, 405), answer.status_code
    assert redis_state(rclient, prefix) == before
