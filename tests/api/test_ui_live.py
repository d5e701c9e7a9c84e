"""The job page's live output (issue 39; api/ui_live.py): an unfinished job's page holds the
live section and its one script, allowed by its hash and nothing else; an ended job's page
neither. GET /ui/jobs/{id}/logs is GET /jobs/{id}/logs?follow=1's stream byte for byte
(its parameters, Last-Event-ID) behind the login cookie, and tried as an attacker would:
without a session, with a forged or ended one, with the key instead, it is the login's
redirect and not a byte of output. The page in a browser: test_ui_live_browser.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from scheduler.api.http import UI_COOKIE
from scheduler.api.ui_headers import CSP, POLICY, UI_HEADERS, UIHeaders, with_script
from scheduler.api.ui_layout import View
from scheduler.api.ui_live import SCRIPT, live_section
from scheduler.api.ui_refresh import page_script
from scheduler.models.job import NOT_STARTED, Job
from tests.api.test_logs import send
from tests.conftest import Serve, assert_ui_error, register, report, submit

KEY = "live-output-operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
SECRET = "s3cret-output-line"
PAGE = page_script(True, SCRIPT)  # the refresh's and the live output's, in one <script>


def running(api: Any, node: str = "n1", **fields: Any) -> str:
    """A job submitted (`node` the only node) and claimed there; its id."""
    job = submit(api, command="echo hi", **fields)
    assert report(api, job["job_id"], "running", node_id=node).status_code == 200
    return str(job["job_id"])


# The page.


def test_a_running_jobs_page_follows_its_output_with_its_one_script(client: TestClient) -> None:
    register(client, "n1")
    job_id = running(client)
    answer = client.get(f"/ui/jobs/{job_id}")
    page = answer.text
    assert answer.headers[CSP] == with_script(PAGE)
    assert "'unsafe-inline'" not in answer.headers[CSP].partition("script-src")[2]
    assert page.count("<script>") == 1 and f"<script>{PAGE}</script></body>" in page
    section = re.search(r'<section id="live" ([^>]*)>(.*?)</section>', page, re.S)
    assert section, page
    assert section.group(1) == (
        f'data-src="/ui/jobs/{job_id}/logs" data-paused="0" data-status="running" '
        'data-attempt="1" data-keep="1048576" data-open="live"'
    )
    assert "<h2>Live output " in section.group(2)
    assert '<pre id="live-output" tabindex="0"></pre>' in section.group(2)
    # The live output comes before the attempts; the page's refresh is the script's, the
    # meta refresh only for a browser without script.
    assert page.index('id="live"') < page.index("<h2>Request")
    assert "<h2>Attempts" not in page  # none ended yet: no empty table
    assert re.findall(r"(.{10})<meta http-equiv=\"refresh\"", page) == ["<noscript>"]
    assert 'id="pause"' in page
    # The record's output comes with the attempt's end: none to show yet, and not "empty".
    assert 'id="output"' not in page and "-empty" not in page


def test_a_paused_page_says_so_to_its_script_and_never_reloads(client: TestClient) -> None:
    register(client, "n1")
    job_id = running(client)
    page = client.get(f"/ui/jobs/{job_id}?refresh=off").text
    assert 'data-paused="1"' in page and 'http-equiv="refresh"' not in page
    assert 'id="resume"' in page


@pytest.mark.parametrize("status", ["pending", "cancelling"])
def test_a_pending_or_cancelling_job_shows_the_live_section(
    client: TestClient, status: str
) -> None:
    register(client, "n1")
    job_id = (
        submit(client, command="sleep 60")["job_id"] if status == "pending" else running(client)
    )
    if status == "cancelling":
        assert client.delete(f"/jobs/{job_id}").status_code == 200
    assert client.get(f"/jobs/{job_id}").json()["status"] == status
    answer = client.get(f"/ui/jobs/{job_id}")
    assert 'id="live"' in answer.text and answer.headers[CSP] == with_script(PAGE)
    # A job not started has nothing live: its header says neither "Live" nor "live".
    heading, opened = ("Output as it runs", "waiting for it to start")
    if status == "cancelling":
        heading, opened = ("Live output", "live")
    assert f"<h2>{heading} " in answer.text and f'data-open="{opened}"' in answer.text


@pytest.mark.parametrize("status", NOT_STARTED)
def test_no_job_not_started_says_live(status: str) -> None:
    job = Job(job_id="job-1", node_id="", command="x", status=status, retry_count=0,
              created_at="2026-01-01T00:00:00.000000Z")  # fmt: skip
    section = live_section(job, View(paused=False, now=0.0), 1024)
    assert "live" not in re.sub(r'id="live[-a-z]*"', "", section).lower()


def test_a_retried_jobs_page_says_whose_output_the_record_holds(client: TestClient) -> None:
    """Running again after a failed attempt, the record holds that attempt's output: shown
    as the last ended attempt's, never as the running one's."""
    register(client, "n1")
    job_id = running(client, max_retries=1)
    assert report(client, job_id, "failed", exit_code=1, stderr="first\n").is_success
    assert report(client, job_id, "running", node_id="n1").is_success
    page = client.get(f"/ui/jobs/{job_id}").text
    output = re.search(r'<section id="output">(.*?)</section>', page, re.S)
    assert output and 'id="output-when"' in output.group(1) and "first\n" in output.group(1)
    assert "empty" not in output.group(1)  # stdout: none reported, nothing claimed


def test_an_ended_jobs_page_runs_no_script(client: TestClient) -> None:
    register(client, "n1")
    job_id = running(client)
    send(client, job_id, "live line\n", 0)
    assert report(client, job_id, "done", node_id="n1", exit_code=0, stdout="stored\n").is_success
    answer = client.get(f"/ui/jobs/{job_id}")
    assert answer.headers[CSP] == POLICY
    assert "<script" not in answer.text and 'id="live"' not in answer.text
    assert '<pre id="stdout" class="stdout">stored\n</pre>' in answer.text  # the record's
    assert 'id="output-when"' not in answer.text


def test_the_script_writes_text_only() -> None:
    """The output is anyone's who can run a job: the script makes elements and sets their
    text, never markup, and evaluates nothing."""
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "Function(", "setTimeout(\"", "href", "src =", ".src"):  # fmt: skip
        assert sink not in SCRIPT, sink
    assert "span.textContent = text" in SCRIPT
    assert "</script" not in SCRIPT  # it would end the element the hash is taken of


# The headers: one policy a page may set.


@pytest.mark.parametrize(
    ("set_by_page", "sent"),
    [
        ("", POLICY),
        (with_script(SCRIPT), with_script(SCRIPT)),
        (with_script("alert(1)"), with_script("alert(1)")),  # another hash: still one script
        ("default-src *", POLICY),
        (POLICY + "; script-src 'unsafe-inline'", POLICY),
        (POLICY + "; script-src 'self'; connect-src 'self'", POLICY),
        (with_script(SCRIPT) + "; img-src *", POLICY),
        (with_script(SCRIPT).replace("connect-src 'self'", "connect-src *"), POLICY),
    ],
)
def test_the_ui_headers_keep_only_a_policy_of_one_hashed_script(
    set_by_page: str, sent: str
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(CSP.lower().encode(), set_by_page.encode())] if set_by_page else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sent_messages: list[Any] = []

    async def collect(message: Any) -> None:
        sent_messages.append(message)

    scope = {"type": "http", "path": "/ui/jobs/job-1", "headers": []}
    asyncio.run(UIHeaders(app)(scope, None, collect))  # type: ignore[arg-type]
    headers = [(k.decode(), v.decode()) for k, v in sent_messages[0]["headers"]]
    policies = [value for name, value in headers if name.lower() == CSP.lower()]
    assert policies == [sent]
    assert ("x-frame-options", UI_HEADERS["X-Frame-Options"]) in headers


# The route: the API's follow, behind the login.


@pytest.fixture
def served(serve: Serve) -> Iterator[httpx.Client]:
    """A real server with a key (open agents): n1, and a UI session's cookie in `cookies`."""
    with httpx.Client(base_url=serve(api_key=KEY), timeout=30, follow_redirects=False) as http:
        register(http, "n1")  # type: ignore[arg-type]
        answer = http.post("/ui/login", data={"key": KEY})
        assert answer.status_code == 303
        http.cookies.clear()
        http.headers.update(OPERATOR)
        http.headers["Cookie"] = f"{UI_COOKIE}={answer.cookies[UI_COOKIE]}"
        yield http


def ended_with_output(http: httpx.Client) -> str:
    """A job with output on both streams over two attempts, then done: its streams end."""
    job_id = running(http, max_retries=1)
    send(http, job_id, "first try\n", 0)
    assert report(http, job_id, "failed", node_id="n1", exit_code=1).is_success  # type: ignore[arg-type]
    assert report(http, job_id, "running", node_id="n1").is_success  # type: ignore[arg-type]
    send(http, job_id, "out <b>1</b>\n", 0)
    send(http, job_id, "err <img src=x onerror=alert(1)>\n", 0, "stderr")
    send(http, job_id, f"{SECRET}\n", 13)
    assert report(http, job_id, "done", node_id="n1", exit_code=0).is_success  # type: ignore[arg-type]
    return job_id


def test_the_ui_stream_is_the_apis_follow_byte_for_byte(served: httpx.Client) -> None:
    job_id = ended_with_output(served)
    api = f"/jobs/{job_id}/logs?follow=1"
    ui = f"/ui/jobs/{job_id}/logs"
    whole = served.get(ui)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith(
        "text/event-stream"
    )
    assert whole.content == served.get(api).content
    assert whole.text.count("event: output") == 3 and "event: end" in whole.text
    ids = re.findall(r"^id: (.+)$", whole.text, re.M)
    for query in ("stream=stderr", "stream=stdout", "attempt=1", f"after={ids[0]}"):
        assert served.get(f"{ui}?{query}").content == served.get(f"{api}&{query}").content, query
    resumed = {"Last-Event-ID": ids[1]}
    after = served.get(ui, headers=resumed)
    assert after.content == served.get(api, headers=resumed).content
    assert after.text.count("event: output") == 1 and SECRET in after.text
    # The UI's headers, and no script policy: a stream is no page.
    assert after.headers[CSP] == POLICY and after.headers["x-frame-options"] == "DENY"
    assert after.headers["cache-control"] == "no-store"


def test_bad_parameters_and_a_missing_job_are_pages_of_the_ui(served: httpx.Client) -> None:
    job_id = running(served)
    for query, message in [
        ("stream=stdin", "invalid stream: use one of stdout, stderr"),
        ("attempt=0", "invalid attempt: use an attempt number, 1 or more"),
        ("after=nope", "invalid after: use the id of an event this stream sent"),
        ("stream=stdout&stream=stderr", 'parameter "stream" given more than once'),
    ]:
        assert_ui_error(served.get(f"/ui/jobs/{job_id}/logs?{query}"), 400, message)
    for missing in ("job-999", "<script>"):
        assert_ui_error(served.get(f"/ui/jobs/{missing}/logs"), 404, "job not found")
    assert served.post(f"/ui/jobs/{job_id}/logs").status_code == 405


def test_without_a_session_the_stream_is_the_logins_redirect_and_no_output(
    served: httpx.Client,
) -> None:
    job_id = ended_with_output(served)
    session = served.headers.pop("Cookie")
    path = f"/ui/jobs/{job_id}/logs"
    tries: list[tuple[str, str, dict[str, str]]] = [
        ("GET", path, {}),
        ("HEAD", path, {}),
        ("GET", f"{path}?follow=1&after=0-0", {}),
        ("GET", path, {"Last-Event-ID": "0-0"}),
        ("GET", path, {"Cookie": f"{UI_COOKIE}=forged"}),
        ("GET", path, {"Cookie": f"{UI_COOKIE}={session.split('=', 1)[1]}x"}),
        ("GET", path, {"Accept": "text/event-stream"}),  # as an EventSource asks
    ]
    served.headers.pop("Authorization")
    for method, target, headers in tries:
        answer = served.request(method, target, headers=headers)
        assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login"), target
        assert SECRET not in answer.text and "event:" not in answer.text
        assert answer.headers["x-frame-options"] == "DENY"
    # The key opens the API's follow, not the UI's: the UI is the session's.
    keyed = served.get(path, headers=OPERATOR)
    assert (keyed.status_code, keyed.headers["location"]) == (303, "/ui/login")
    assert SECRET in served.get(f"/jobs/{job_id}/logs?follow=1", headers=OPERATOR).text
    # A session's cookie opens it, until its logout.
    cookie = {"Cookie": session}
    assert SECRET in served.get(path, headers=cookie).text
    assert served.post("/ui/logout", headers=cookie).status_code == 303
    ended = served.get(path, headers=cookie)
    assert (ended.status_code, ended.headers["location"]) == (303, "/ui/login")
    assert SECRET not in ended.text
