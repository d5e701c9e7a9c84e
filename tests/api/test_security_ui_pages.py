"""The web UI's pages for operators (issue 25, item 6) tried as an attacker would, over HTTP
against `scheduler serve`'s protocol on a real Redis: markup sent through every parameter
the jobs page reads and through the path (reflected), markup stored in a job's command
(shown in the list, a title, the search), the search as a way to make Redis work (its
length, Lua patterns, its bound), and paging or refresh values out of range. Each is
refused or shown as text, with the UI's headers, and leaves Redis as it was (the request
metrics, sessions and the UI's secret aside: the test's own calls add to them)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
import redis

from scheduler.api import ui_jobs
from scheduler.api.ui_headers import POLICY, with_script
from scheduler.api.ui_live import SCRIPT
from scheduler.api.ui_refresh import page_script
from tests.conftest import Serve
from tests.deployment_state import deployment_state

MARKUP = '<script>alert("x")</script>\'"><svg onload=alert(1)>'
# What an attacker's markup would look like unescaped in the page.
RAW = ("<script>alert", "<svg onload", '"><svg')
# Written by the test's own calls, not by an attack: the request metrics, the no-key UI's
# secret (made on first use).
OWN_KEYS = re.compile(rb":(stats:requests|ui:secret|ui:session:.*|authfail:.*)$")


@pytest.fixture
def api(serve: Serve) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serve(), follow_redirects=False) as client:
        assert client.post("/nodes/register", json={"id": "n1"}).status_code == 201
        yield client


def redis_state(rclient: redis.Redis, prefix: str) -> dict[bytes, bytes]:
    """Every key of the deployment with its value (DUMP), those of OWN_KEYS left out."""
    return deployment_state(rclient, prefix, lambda key: OWN_KEYS.search(key) is not None)


def shown_as_text(answer: httpx.Response) -> None:
    """No markup of the attacker's as markup, and the UI's headers (no script may run but
    the UI's own, named by its hash: the refresh, ui_refresh.py, and an unfinished job's
    page's live output, ui_live.py)."""
    for raw in RAW:
        assert raw not in answer.text, (answer.url, raw)
    assert answer.headers["content-type"] == "text/html; charset=utf-8", answer.url
    policy = answer.headers["content-security-policy"]
    scripts = (page_script(True, ""), page_script(True, SCRIPT))  # the refresh, the live
    assert policy in (POLICY, *map(with_script, scripts)), answer.url
    assert answer.text.count("<script>") == (policy != POLICY), answer.url


READS = ("q", "node_id", "status", "before", "after", "refresh")


def test_markup_in_any_parameter_or_the_path_comes_back_as_text(
    api: httpx.Client, rclient: redis.Redis, prefix: str
) -> None:
    assert api.post("/jobs", json={"command": "echo hi"}).status_code == 201
    before = redis_state(rclient, prefix)
    for name in READS:
        answer = api.get("/ui/jobs", params={name: MARKUP})
        assert answer.status_code in (200, 400), (name, answer.text)
        shown_as_text(answer)
    searched = api.get("/ui/jobs", params={"q": MARKUP[:200]})
    assert searched.status_code == 200 and "&lt;script&gt;alert(&quot;x&quot;)" in searched.text
    for path in ("/ui/jobs/" + MARKUP, "/ui/" + MARKUP, "/ui/jobs/job-1/" + MARKUP):
        answer = api.get(path)
        assert answer.status_code == 404, path
        shown_as_text(answer)
    assert redis_state(rclient, prefix) == before


def test_markup_in_a_command_is_text_in_the_list_its_title_and_the_search(
    api: httpx.Client, rclient: redis.Redis, prefix: str
) -> None:
    long = MARKUP + " " + "x" * 100  # shortened in the cell, whole in its title
    assert api.post("/jobs", json={"command": long, "env_vars": {"K": MARKUP}}).is_success
    before = redis_state(rclient, prefix)
    for path in ("/ui/jobs", "/ui/jobs/job-1", "/ui/jobs?q=script", "/ui/jobs?q=%22%3E%3Csvg"):
        answer = api.get(path)
        assert answer.status_code == 200, path
        shown_as_text(answer)
    listed = api.get("/ui/jobs?q=%22%3E%3Csvg").text
    assert re.findall(r"/ui/jobs/(job-\d+)\"", listed) == ["job-1"]
    assert 'title="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27;&quot;&gt;' in listed
    assert redis_state(rclient, prefix) == before


def test_the_search_is_bounded_and_plain_text(
    api: httpx.Client, rclient: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search over many jobs reads at most SEARCH_SCAN records' heads (GETRANGE, counted by
    Redis), never the rest of Redis; a huge or unprintable needle is a 400 before any Redis
    work; Lua's pattern characters are plain text."""
    monkeypatch.setattr(ui_jobs, "SEARCH_SCAN", 25)
    for n in range(120):
        assert api.post("/jobs", json={"command": f"run {n}"}).status_code == 201
    before = redis_state(rclient, prefix)

    def getranges() -> int:
        return int(rclient.info("commandstats").get("cmdstat_getrange", {"calls": 0})["calls"])

    read = getranges()
    page = api.get("/ui/jobs", params={"q": "nowhere"})
    assert page.status_code == 200 and "Searched the 25 most recent jobs" in page.text
    assert getranges() - read <= 25
    for needle in ("x" * 201, "x" * 10_000, "a\x00b", "a\nb"):
        read = getranges()
        refused = api.get("/ui/jobs", params={"q": needle})
        assert refused.status_code in (400, 414, 431), refused.status_code
        assert getranges() == read
    for pattern in ("%", "%d+", "[", ".*", "(", "%z"):
        answer = api.get("/ui/jobs", params={"q": pattern})
        assert answer.status_code == 200 and 'id="jobs"' in answer.text, pattern
        assert "<td><a href=" not in answer.text  # no command holds them: nothing found
    assert redis_state(rclient, prefix) == before


def test_paging_and_refresh_values_out_of_range_are_400(
    api: httpx.Client, rclient: redis.Redis, prefix: str
) -> None:
    assert api.post("/jobs", json={"command": "x"}).status_code == 201
    before = redis_state(rclient, prefix)
    for query in (
        "before=9007199254740993",
        "after=" + "9" * 5000,
        "before=1&after=1",
        "after=-1",
        "before=job-x",
        "q=x&after=1",
        "refresh=on",
        "refresh=" + "off" * 1000,
    ):
        answer = api.get(f"/ui/jobs?{query}")
        assert answer.status_code == 400, query
        shown_as_text(answer)
        assert 'id="error"' in answer.text and '<a href="/ui/jobs">Jobs</a>' in answer.text
    assert redis_state(rclient, prefix) == before
