"""The web UI's pages as HTML (tests/api/test_ui_browser.py drives them in a real browser):
who may see them, that what they show is escaped, and that bad filters are 400s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from scheduler.api import ui_jobs
from scheduler.api.http import UI_COOKIE
from scheduler.models.job import STATUSES
from tests.conftest import (
    ClientFactory,
    SettingsFactory,
    assert_text_error,
    assert_ui_error,
    register,
    report,
    submit,
)
from tests.snapshot_helpers import go_file

KEY = "ui-key"


def test_without_a_key_the_pages_are_open(client: TestClient) -> None:
    register(client, "n1")
    submit(client, command="echo hi")
    for path in ("/ui", "/ui/jobs", "/ui/jobs/job-1", "/ui/nodes"):
        response = client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert "Log out" not in response.text


def test_with_a_key_the_pages_need_the_login_cookie(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY)
    for path in ("/ui", "/ui/jobs", "/ui/jobs/job-1", "/ui/nodes"):
        response = api.get(path, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/ui/login")
    # The key as a bearer does not open the UI, and a forged cookie does not either.
    assert api.get("/ui/jobs", headers={"Authorization": f"Bearer {KEY}"}).url.path == "/ui/login"
    api.cookies.set(UI_COOKIE, "0" * 64)
    assert api.get("/ui/jobs").url.path == "/ui/login"
    api.cookies.clear()
    assert api.post("/ui/login", data={"key": "nope"}).status_code == 401
    logged_in = api.post("/ui/login", data={"key": KEY}, follow_redirects=False)
    assert (logged_in.status_code, logged_in.headers["location"]) == (303, "/ui")
    cookie = logged_in.headers["set-cookie"]
    assert (
        KEY not in cookie and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    )
    assert api.get("/ui/jobs").status_code == 200
    # The API's own routes still want the key, cookie or not.
    assert api.get("/jobs").status_code == 401


def test_the_login_shows_no_navigation_and_says_where_ups_key_is(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logged out, every link of the navigation and Log out would lead back to the login: the
    page shows none, and says where `scheduler up` keeps the key it made (XDG_STATE_HOME
    unset: under ~/.local/state; tests/api/test_ui_login.py for the rest)."""
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("SCHEDULER_URL", raising=False)
    api = make_client(api_key=KEY)
    page = api.get("/ui/login").text
    assert "<nav>" not in page and "Log out" not in page and "/ui/jobs" not in page
    help_ = re.search(r'<div id="key-help">(.*?)</div>', page, re.S)
    assert help_ and "TINYAWS_API_KEY" in help_.group(1)
    assert "named key" in help_.group(1) and "scheduler key add" in help_.group(1)
    # The address the browser came to (TestClient's: testserver, port 80), as up names it.
    assert "cat ~/.local/state/tinyaws-scheduler/testserver-80/api-key" in help_.group(1)
    assert "<nav>" not in api.post("/ui/login", data={"key": "nope"}).text  # a wrong key
    refused = api.post("/ui/login", data={"key": KEY}, headers={"Origin": "https://evil.test"})
    assert (
        refused.status_code == 403 and "<nav>" not in refused.text and "Log out" not in refused.text
    )
    api.post("/ui/login", data={"key": KEY})
    assert "<nav>" in api.get("/ui/jobs").text and "Log out" in api.get("/ui/jobs").text


def test_what_a_job_holds_is_escaped(client: TestClient) -> None:
    register(client, "n1")
    submit(client, command="<script>alert(1)</script>", env_vars={"X": "<img src=x>"})
    page = client.get("/ui/jobs/job-1").text + client.get("/ui/jobs").text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x>" not in page and "&lt;img" not in page  # env values are not shown


def test_bad_filters_are_400_and_unknown_jobs_404(client: TestClient) -> None:
    assert_ui_error(
        client.get("/ui/jobs?status=nope"),
        400,
        "invalid status: use one of pending, delayed, waiting, running, done, failed, cancelling",
    )
    assert client.get("/ui/jobs?node_id=a%20b").status_code == 400
    assert client.get("/ui/jobs?before=" + "9" * 5000).status_code == 400
    assert client.get("/ui/jobs?before=-1").status_code == 400
    assert client.get("/ui/jobs/job-9").status_code == 404
    assert client.get("/ui/jobs/%2E%2E").status_code == 404


def test_the_cancel_form_needs_its_token(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    api.post("/jobs", json={"command": "x"}, headers=key)
    api.post("/ui/login", data={"key": KEY})
    page = api.get("/ui/jobs/job-1").text
    assert 'id="cancel"' in page
    # The button is behind a question (closed until opened): the form there carries the
    # page's token, posted to the same route as before.
    asked = re.search(r'<details class="confirm" id="cancel-confirm">(.*?)</details>', page, re.S)
    assert (
        asked
        and "<summary" in asked.group(1)
        and 'id="keep" href="/ui/jobs/job-1"' in asked.group(1)
    )
    form = re.search(
        r'<form method="post" action="/ui/jobs/job-1/cancel">(.*?)</form>', asked.group(1)
    )
    assert form and 'id="cancel"' in form.group(1)
    assert page.count('name="csrf"') == 1 and 'name="csrf"' in form.group(1)
    # A form posted from elsewhere carries no token (and, cross-site, no cookie either).
    assert api.post("/ui/jobs/job-1/cancel", data={"csrf": "x"}).status_code == 403
    assert api.get("/jobs/job-1", headers=key).json()["status"] == "pending"
    token = page.split('name="csrf" value="')[1].split('"')[0]
    assert KEY not in token
    done = api.post("/ui/jobs/job-1/cancel", data={"csrf": token}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-1")
    assert api.get("/jobs/job-1", headers=key).json()["failure_reason"] == "cancelled"
    # Said plainly, with who asked (the record's cancelled_by), once: no route names.
    page = api.get("/ui/jobs/job-1").text
    assert '<span class="why" title="cancelled">cancelled on request by admin</span>' in page
    assert "DELETE" not in page and "cancelled by" not in page  # not again in the request


def test_a_failed_job_offers_a_retry_that_needs_the_token(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    api.post("/jobs", json={"command": "x", "max_retries": 0}, headers=key)
    api.patch("/jobs/job-1", json={"status": "running"})
    api.patch("/jobs/job-1", json={"status": "failed", "exit_code": 2})
    api.post("/ui/login", data={"key": KEY})
    page = api.get("/ui/jobs/job-1").text
    assert 'id="retry"' in page and 'id="cancel"' not in page
    assert api.post("/ui/jobs/job-1/retry", data={"csrf": "x"}).status_code == 403
    assert api.get("/jobs/job-1", headers=key).json()["status"] == "failed"
    token = page.split('name="csrf" value="')[1].split('"')[0]
    done = api.post("/ui/jobs/job-1/retry", data={"csrf": token}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-1")
    assert api.get("/jobs/job-1", headers=key).json()["status"] == "pending"
    assert 'id="cancel"' in api.get("/ui/jobs/job-1").text  # pending: it may be cancelled
    again = api.post("/ui/jobs/job-1/retry", data={"csrf": token})
    assert again.status_code == 409  # not failed any more: nothing changes


def test_a_map_field_shows_its_names_never_its_values() -> None:
    """env_vars' values stay off the job page, and so would those of any map a field added
    to Job later holds (secrets are the usual values of a map of strings)."""
    from scheduler.api.ui_job import _cell
    from scheduler.models.fields import JobField, Kind

    labels = JobField("labels", dict[str, str], Kind.OBJECT, False, False, True)
    html = _cell(labels, {"SECRET_NAME": "hunter2"})
    assert "SECRET_NAME" in html and "hunter2" not in html


# The dead set's bulk retry (issue 23, item 8): the failed list's button, POST /ui/jobs/retry.


def failed_jobs(api: TestClient, key: dict[str, str], count: int) -> list[str]:
    """`count` jobs on n1 out of retries and failed (newest first, as the list shows them)."""
    ids = []
    for _ in range(count):
        job = api.post("/jobs", json={"command": "x", "max_retries": 0}, headers=key).json()
        api.patch(f"/jobs/{job['job_id']}", json={"status": "running"})
        api.patch(f"/jobs/{job['job_id']}", json={"status": "failed", "exit_code": 2})
        ids.insert(0, job["job_id"])
    return ids


def statuses(api: TestClient, key: dict[str, str], ids: list[str]) -> list[str]:
    return [api.get(f"/jobs/{job_id}", headers=key).json()["status"] for job_id in ids]


def test_the_failed_list_retries_its_page_with_the_token(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    dead = failed_jobs(api, key, 2)
    alive = api.post("/jobs", json={"command": "x"}, headers=key).json()["job_id"]
    api.post("/ui/login", data={"key": KEY})
    for other in ("/ui/jobs", "/ui/jobs?status=pending", "/ui/jobs?status=done"):
        assert 'id="retry-failed"' not in api.get(other).text  # the failed list's only
    page = api.get("/ui/jobs?status=failed").text
    assert ">Retry these 2 failed jobs</button>" in page
    form = page.split('action="/ui/jobs/retry">')[1].split("</form>")[0]
    assert form.count('type="hidden" name="job_id"') == 2
    assert all(f'name="job_id" value="{job_id}"' in form for job_id in dead)
    token = form.split('name="csrf" value="')[1].split('"')[0]
    assert token and KEY not in token

    # Another site's form: no token, a wrong one, the token under another name.
    for forged in ({}, {"csrf": "x"}, {"csrf": ""}, {"token": token}):
        answer = api.post("/ui/jobs/retry", data={**forged, "job_id": dead})
        assert answer.status_code == 403, forged
    assert statuses(api, key, dead) == ["failed", "failed"]
    # Without the login cookie (cross-site, SameSite=Strict keeps it back): the login form.
    stranger = make_client(api_key=KEY)
    away = stranger.post(
        "/ui/jobs/retry", data={"csrf": token, "job_id": dead}, follow_redirects=False
    )
    assert (away.status_code, away.headers["location"]) == (303, "/ui/login")
    assert statuses(api, key, dead) == ["failed", "failed"]

    # The page's form, plus a job that is not failed and one that does not exist.
    posted = {"csrf": token, "job_id": [*dead, alive, "job-99", dead[0]]}
    done = api.post("/ui/jobs/retry", data=posted, follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == "/ui/jobs?status=failed&retried=2&skipped=2"
    assert statuses(api, key, [*dead, alive]) == ["pending", "pending", "pending"]
    assert api.get("/jobs/job-99", headers=key).status_code == 404
    back = api.get(done.headers["location"]).text
    assert '<p class="notice" id="notice">Retried 2 failed job(s). 2 not retried' in back
    assert "no jobs" in back and 'id="retry-failed"' not in back  # the dead set is empty
    # Again: nothing is failed any more, nothing changes.
    again = api.post("/ui/jobs/retry", data={"csrf": token, "job_id": dead})
    assert again.url.query == b"status=failed&retried=0&skipped=2"


def test_the_failed_lists_button_leaves_the_cancelled_jobs_alone(
    make_client: ClientFactory,
) -> None:
    """As the CLI's `retry --failed`: a cancelled job (failed, failure_reason cancelled) was
    stopped on purpose, so the button neither counts nor posts it; one alone: no button."""
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    [dead] = failed_jobs(api, key, 1)
    stopped = api.post("/jobs", json={"command": "sleep 9"}, headers=key).json()["job_id"]
    assert api.delete(f"/jobs/{stopped}", headers=key).status_code == 200
    api.post("/ui/login", data={"key": KEY})
    page = api.get("/ui/jobs?status=failed").text
    assert stopped in page  # listed, as a failed job
    form = page.split('action="/ui/jobs/retry">')[1].split("</form>")[0]
    assert ">Retry these 1 failed job</button> (1 cancelled left alone" in form
    assert f'value="{dead}"' in form and f'value="{stopped}"' not in form
    token = form.split('name="csrf" value="')[1].split('"')[0]
    api.post("/ui/jobs/retry", data={"csrf": token, "job_id": [dead]})
    assert statuses(api, key, [dead, stopped]) == ["pending", "failed"]
    page = api.get("/ui/jobs?status=failed").text
    assert stopped in page and 'id="retry-failed"' not in page


def test_the_bulk_retry_bounds_its_ids_and_changes_nothing_on_bad_input(
    make_client: ClientFactory,
) -> None:
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    [dead] = failed_jobs(api, key, 1)
    api.post("/ui/login", data={"key": KEY})
    page = api.get("/ui/jobs?status=failed").text
    assert ">Retry these 1 failed job</button>" in page
    token = page.split('name="csrf" value="')[1].split('"')[0]
    many = [dead] * 51  # past a page (50), even repeated
    for job_ids, message in (
        ([], "invalid job_id: give 1 to 50 job ids"),
        (many, "invalid job_id: give 1 to 50 job ids"),
        ([dead, "a b"], "invalid job_id: 'a b' is not a job id"),
        ([dead, ".."], "invalid job_id: '..' is not a job id"),
        ([dead, ""], "invalid job_id: '' is not a job id"),
        ([dead, "x" * 129], f"invalid job_id: {'x' * 64!r} is not a job id"),
        ([dead, "<script>"], "invalid job_id: '<script>' is not a job id"),
    ):
        answer = api.post("/ui/jobs/retry", data={"csrf": token, "job_id": job_ids})
        assert_ui_error(answer, 400, message)
    bad_node = {"csrf": token, "job_id": dead, "node_id": "../x"}
    assert api.post("/ui/jobs/retry", data=bad_node).status_code == 400
    huge = {"csrf": token, "job_id": [dead] * 50, "pad": "x" * 20000}
    assert api.post("/ui/jobs/retry", data=huge).status_code == 413
    assert statuses(api, key, [dead]) == ["failed"]
    # The largest page the form can hold fits: 50 ids of 128 characters.
    longest = [f"{n:03d}" + "x" * 125 for n in range(50)]
    full = api.post("/ui/jobs/retry", data={"csrf": token, "job_id": longest})
    assert full.url.query == b"status=failed&retried=0&skipped=50"
    # The notice takes whole numbers only, up to a page: nothing else reaches the page.
    for query in ("retried=x", "retried=-1", "retried=51", "skipped=1e3", "retried=<b>"):
        assert api.get(f"/ui/jobs?status=failed&{query}").status_code == 400, query
    assert statuses(api, key, [dead]) == ["failed"]


def test_the_bulk_retry_keeps_the_node_filter_and_reports_unplaced_jobs(
    make_client: ClientFactory,
) -> None:
    api = make_client(api_key=KEY)
    key = {"Authorization": f"Bearer {KEY}"}
    api.post("/nodes/register", json={"id": "n1"})
    [dead] = failed_jobs(api, key, 1)
    api.post("/ui/login", data={"key": KEY})
    page = api.get("/ui/jobs?status=failed&node_id=n1").text
    assert 'name="node_id" value="n1"' in page.split('action="/ui/jobs/retry">')[1]
    token = page.split('name="csrf" value="')[1].split('"')[0]
    assert api.delete("/nodes/n1", headers=key).status_code == 204  # no node to run it on
    posted = {"csrf": token, "job_id": dead, "node_id": "n1"}
    done = api.post("/ui/jobs/retry", data=posted, follow_redirects=False)
    location = "/ui/jobs?status=failed&node_id=n1&retried=0&unplaced=1"
    assert (done.status_code, done.headers["location"]) == (303, location)
    assert "no healthy compute node" in api.get(location).text
    assert statuses(api, key, [dead]) == ["failed"]


# The jobs page for operators (issue 25, item 6): what each row says, counts per status,
# newer and older pages, the search, the refresh's pause, errors inside the layout.


def rows_of(page: str) -> list[str]:
    """The jobs table's rows (HTML), header left out."""
    table = page.split('<table class="cards" id="jobs">', 1)[1].split("</table>", 1)[0]
    return table.split("<tr>")[2:]


def ids_of(page: str) -> list[str]:
    return re.findall(r'<td data-label="job"><a href="/ui/jobs/(job-\d+)[?"]', page)


def cells_of(row: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", row)


def test_a_row_says_attempt_exit_code_run_time_and_times_on_hover(client: TestClient) -> None:
    register(client, "n1")
    done = submit(client, command="echo done")["job_id"]
    retried = submit(client, command="echo again", max_retries=1)["job_id"]
    submit(client, command="echo waits")
    report(client, done, "running")
    report(client, done, "done", exit_code=0)
    report(client, retried, "running")
    report(client, retried, "failed", exit_code=3)  # retried: pending again, attempt 2
    report(client, retried, "running")
    page = client.get("/ui/jobs").text
    heads = re.findall(
        r"<th>(.*?)</th>", page.split('<table class="cards" id="jobs">')[1].split("</tr>")[0]
    )
    assert heads == [
        "job", "node", "status", "command", "attempt", "exit code", "created", "ran for",
        "finished",
    ]  # fmt: skip
    waits, again, first = (cells_of(row) for row in rows_of(page))
    assert first[4:6] == ["1", "0"] and 'title="0 retries"' in rows_of(page)[2]
    assert again[4:6] == ["2", ""] and 'title="1 retry"' in rows_of(page)[1]
    assert waits[4:] == ["1", "", waits[6], "", ""]  # never ran: no exit, no run time
    assert re.fullmatch(r"\d+ ms|[\d.]+ s", first[7]), first[7]
    assert first[8].endswith(("ago</time>", "just now</time>"))
    assert again[7].endswith(" so far")  # running: how long so far
    # A time is relative, the exact one in its title (a hover shows it): no microseconds.
    created = re.fullmatch(r'<time datetime="([^"]+)" title="([^"]+)">(.*)</time>', first[6])
    assert created is not None
    stamp, exact, said = created.groups()
    assert stamp == client.get(f"/jobs/{done}").json()["created_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", exact)
    assert said == "just now" or said.endswith(" ago")
    assert ".0" not in said and stamp not in page.split("</time>")[-1]


def test_span_reads_as_people_say_it() -> None:
    from scheduler.models.spans import span

    cases = {
        0.25: "250 ms",
        0.0: "0 ms",
        1.5: "1.5 s",
        3.0: "3 s",
        42.0: "42 s",
        185.0: "3 min 5 s",
        3600.0: "1 h",
    }
    cases |= {7830.0: "2 h 10 min", 3 * 86400 + 4 * 3600 + 5: "3 d 4 h", 86400 + 59: "1 d"}
    assert {secs: span(secs) for secs in cases} == cases


def test_counts_per_status_link_to_their_lists(client: TestClient) -> None:
    register(client, "n1", "n2")
    for _ in range(3):
        submit(client, command="x")  # job-1, job-3 on n1; job-2 on n2
    report(client, "job-1", "running")
    page = client.get("/ui/jobs").text
    counts = dict(re.findall(r'id="count-(\w+)"[^>]*>\w+ (\d+)</a>', page))
    assert counts == {
        "all": "3", "pending": "2", "delayed": "0", "waiting": "0", "running": "1",
        "done": "0", "failed": "0", "cancelling": "0",
    }  # fmt: skip
    assert '<a id="count-running" href="/ui/jobs?status=running">running 1</a>' in page
    # One node's counts, its filter kept on every link; the list shown is marked.
    node = client.get("/ui/jobs?node_id=n1&status=pending").text
    assert '<a id="count-all" href="/ui/jobs?node_id=n1">all 2</a>' in node
    assert (
        'id="count-pending" class="current" href="/ui/jobs?status=pending&amp;node_id=n1"' in node
    )
    assert "pending 1</a>" in node and "running 1</a>" in node


def test_pages_go_older_and_newer(client: TestClient) -> None:
    register(client, "n1")
    for n in range(120):
        submit(client, command=f"echo {n}")
    first = client.get("/ui/jobs").text
    assert ids_of(first) == [f"job-{n}" for n in range(120, 70, -1)]
    assert 'id="newer"' not in first and 'id="newest"' not in first
    older = re.search(r'id="older" href="([^"]+)"', first)
    assert older and older.group(1) == "/ui/jobs?before=71"
    second = client.get(older.group(1)).text
    assert ids_of(second) == [f"job-{n}" for n in range(70, 20, -1)]
    assert 'id="newer" href="/ui/jobs?after=70"' in second
    third = client.get("/ui/jobs?before=21").text
    assert ids_of(third) == [f"job-{n}" for n in range(20, 0, -1)] and 'id="older"' not in third
    back = client.get("/ui/jobs?after=20").text
    assert ids_of(back) == ids_of(second)
    assert (
        'id="newer" href="/ui/jobs?after=70"' in back
        and 'id="older" href="/ui/jobs?before=21"' in back
    )
    top = client.get("/ui/jobs?after=70").text
    assert ids_of(top) == ids_of(first) and 'id="newer"' not in top
    assert 'id="older" href="/ui/jobs?before=71"' in top
    # The filters stay on the links; a page not the newest does not refresh itself.
    filtered = client.get("/ui/jobs?status=pending&before=71").text
    assert 'id="newer" href="/ui/jobs?status=pending&amp;after=70"' in filtered
    assert 'http-equiv="refresh"' in first and 'http-equiv="refresh"' not in second
    for bad in ("before=1&after=2", "after=x", "after=-1", "after=job-", "q=x&after=3"):
        assert client.get(f"/ui/jobs?{bad}").status_code == 400, bad


def test_search_finds_commands_by_substring(client: TestClient) -> None:
    register(client, "n1")
    commands = [
        "echo alpha",
        'say "hi" \\ there',
        "printf 'caf\u00e9\\n'",
        "backup --db=Alpha",
        "x" * 3000 + " needle-at-the-end",
        "50%d done",
    ]
    for command in commands:
        submit(client, command=command, env_vars={"V": "alpha-in-env"})
    submit(client, command="echo plain", env_vars={"ALPHA": "1"})
    report(client, "job-7", "running")
    report(client, "job-7", "done", exit_code=0, stdout="alpha in the output")

    def found(query: str) -> list[str]:
        page = client.get("/ui/jobs", params={"q": query})
        assert page.status_code == 200, page.text
        return ids_of(page.text)

    assert found("alpha") == ["job-4", "job-1"]  # ASCII case ignored; env and output not
    assert found('"hi" \\') == ["job-2"]  # quotes and backslashes as typed
    assert found("caf\u00e9\\n") == ["job-3"]
    assert found("needle-at-the-end") == ["job-5"]  # past the head read first
    assert found("%d") == ["job-6"] and found(".") == []  # plain text, not a Lua pattern
    assert found("nowhere") == []
    page = client.get("/ui/jobs?q=alpha&status=pending").text
    assert ids_of(page) == ["job-4", "job-1"]
    assert "Searched the 6 most recent jobs of this list (at most 5,000 a page)" in page
    assert 'id="q" type="search"' in page and 'value="alpha"' in page
    assert 'http-equiv="refresh"' not in page  # a search does not run again every 5 s
    assert client.get("/ui/jobs", params={"q": "x" * 201}).status_code == 400
    assert client.get("/ui/jobs", params={"q": "a\tb"}).status_code == 400


def test_a_search_looks_through_a_bounded_number_of_jobs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most SEARCH_SCAN jobs a page, newest first; "Search older jobs" goes on from the
    last one looked at, and a full page pages on from its last job."""
    monkeypatch.setattr(ui_jobs, "SEARCH_SCAN", 10)
    register(client, "n1")
    for n in range(1, 31):
        submit(client, command="hit" if n in (3, 25) else "miss")
    first = client.get("/ui/jobs?q=hit").text
    assert ids_of(first) == ["job-25"]
    assert "Searched the 10 most recent jobs of this list (at most 10 a page)" in first
    assert 'id="search-older" href="/ui/jobs?q=hit&amp;before=21"' in first
    second = client.get("/ui/jobs?q=hit&before=21").text
    assert ids_of(second) == [] and "Searched the 10 most recent jobs before job-21" in second
    third = client.get("/ui/jobs?q=hit&before=11").text
    assert ids_of(third) == ["job-3"] and 'id="search-older"' not in third
    assert "Searched the 10 most recent jobs before job-11" in third
    monkeypatch.setattr(ui_jobs, "PAGE_SIZE", 1)  # a full page: Older, from its last job
    monkeypatch.setattr(ui_jobs, "SEARCH_SCAN", 100)
    full = client.get("/ui/jobs?q=hit").text
    assert ids_of(full) == ["job-25"] and 'id="older" href="/ui/jobs?q=hit&amp;before=25"' in full


def test_a_search_reaches_an_old_snapshots_row_that_is_not_job_n(
    make_client: ClientFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A Go scheduler's file restored: its row `not-a-job` lists oldest, so a search through
    every job looks at it last (its number, read from its id, was nil: a 500)."""
    go_file(path := tmp_path / "go.db")
    client = make_client(make_settings(scheduler_db=str(path)))
    page = client.get("/ui/jobs?q=echo")
    assert page.status_code == 200, page.text
    assert ids_of(page.text) == ["job-99"] and 'href="/ui/jobs/not-a-job"' in page.text
    assert "Searched the 2 most recent jobs" in page.text
    assert 'id="search-older"' not in page.text


def test_a_search_reads_the_jobs_own_command_wherever_its_record_puts_it(
    client: TestClient,
) -> None:
    """A script writes a record's head in no order (lua/includes/encode.lua): the command may
    follow kilobytes of env_vars, among them a variable named `command`; a large spec is kept
    apart (models/record.py)."""
    register(client, "n1")
    env = {"command": "decoy", **{f"V{i}": "x" * 60 for i in range(50)}}  # ~3.5 KB: inline
    # With a priority, once running, cjson writes env_vars before the command.
    small = submit(client, command="the-real-one", env_vars=env, priority=5)["job_id"]
    large = submit(client, command="apart-one", env_vars={"V": "y" * 5000})["job_id"]
    for job_id in (small, large):  # written again by a script
        assert client.patch(f"/jobs/{job_id}", json={"status": "running"}).status_code == 200
    assert ids_of(client.get("/ui/jobs?q=the-real").text) == [small]
    assert ids_of(client.get("/ui/jobs?q=decoy").text) == []
    assert ids_of(client.get("/ui/jobs?q=apart-one").text) == [large]


@pytest.mark.parametrize(("period", "meta"), [("0.5", "1"), ("1.5", "2"), ("5", "5")])
def test_the_no_script_refresh_is_whole_seconds_at_least_one(
    make_client: ClientFactory, period: str, meta: str
) -> None:
    """A browser reads a meta refresh's "0.5" as 0: a reload loop without script."""
    client = make_client(ui_refresh_secs=float(period))
    page = client.get("/ui/jobs").text
    assert f'<noscript><meta http-equiv="refresh" content="{meta}"></noscript>' in page
    assert f'<body data-refresh="{period}">' in page  # the script's own period, as set


def test_the_refresh_pauses_and_stays_paused_across_pages(client: TestClient) -> None:
    register(client, "n1")
    submit(client, command="x")
    live = client.get("/ui/jobs?status=pending").text
    # The refresh is a script that waits for the reader (ui_refresh.py): a meta refresh
    # cannot, so it is only for a browser without script.
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in live
    assert '<body data-refresh="5">' in live and live.count("<script>") == 1
    assert '<a id="pause" href="/ui/jobs?status=pending&amp;refresh=off">' in live
    paused = client.get("/ui/jobs?status=pending&refresh=off").text
    assert 'http-equiv="refresh"' not in paused and "data-refresh" not in paused
    assert "<script>" not in paused
    assert '<a id="resume" href="/ui/jobs?status=pending">Resume refresh</a>' in paused
    for kept in (
        '<a href="/ui/jobs?refresh=off">Jobs</a>',
        '<a href="/ui/nodes?refresh=off">Nodes</a>',
        '<a href="/ui/schedules?refresh=off">Schedules</a>',
        '<a href="/ui/jobs/job-1?refresh=off">job-1</a>',
        '<input type="hidden" name="refresh" value="off">',
        'href="/ui/jobs?status=running&amp;refresh=off"',
    ):
        assert kept in paused, kept
    for path in ("/ui", "/ui/jobs/job-1", "/ui/nodes", "/ui/schedules"):
        assert 'http-equiv="refresh"' in client.get(path).text, path
        still = client.get(f"{path}?refresh=off").text
        assert 'http-equiv="refresh"' not in still and 'id="resume"' in still, path
    home = client.get("/ui?window=day&refresh=off").text  # the dashboard keeps its window
    assert 'href="/ui?window=day"' in home and 'href="/ui/jobs?refresh=off"' in home
    # A button of a paused page goes back to it paused; a bad value changes nothing.
    job = client.get("/ui/jobs/job-1?refresh=off").text
    assert 'action="/ui/jobs/job-1/cancel?refresh=off"' in job
    token = job.split('name="csrf" value="')[1].split('"')[0]
    bad = client.post("/ui/jobs/job-1/cancel?refresh=x", data={"csrf": token})
    assert bad.status_code == 400 and client.get("/jobs/job-1").json()["status"] == "pending"
    done = client.post(
        "/ui/jobs/job-1/cancel?refresh=off", data={"csrf": token}, follow_redirects=False
    )
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-1?refresh=off")
    assert client.get("/jobs/job-1").json()["failure_reason"] == "cancelled"
    assert_ui_error(
        client.get("/ui/jobs?refresh=on"),
        400,
        "invalid refresh: use refresh=off to pause, or leave it out",
    )


def test_errors_are_pages_of_the_ui_with_the_navigation(make_client: ClientFactory) -> None:
    api = make_client(api_key=KEY, auth_failures_max=1)
    api.post("/nodes/register", json={"id": "n1"})
    assert api.post("/ui/login", data={"key": KEY}).status_code == 200
    assert_ui_error(api.get("/ui/jobs/job-404"), 404, "job not found")
    bad = api.get("/ui/jobs?status=nope")
    assert_ui_error(bad, 400, "invalid status: use one of " + ", ".join(STATUSES))
    assert_ui_error(api.get("/ui/nothing-here"), 404, "404 page not found")
    forged = api.post("/ui/jobs/job-1/cancel", data={"csrf": "x"})
    assert_ui_error(forged, 403, "forbidden: the form's token is missing or stale")
    assert "Log out" in forged.text
    page = api.get("/ui/jobs/job-404").text
    assert "<title>404 Not Found · scheduler</title>" in page
    assert '<a href="/ui/jobs">Back to the jobs</a>' in page
    # The login's throttle: its Retry-After kept, the page in the layout, and the form again
    # under what it says (the right key is still served from that address).
    other = make_client(api_key=KEY, auth_failures_max=1)
    assert other.post("/ui/login", data={"key": "wrong"}).status_code == 401
    throttled = other.post("/ui/login", data={"key": "wrong"})
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
    assert "too many wrong credentials" in throttled.text and "<header>" in throttled.text
    assert 'id="key"' in throttled.text
    assert other.post("/ui/login", data={"key": KEY}).status_code == 200  # to /ui
    # The API's own errors stay the original's plain text.
    operator = {"Authorization": f"Bearer {KEY}"}
    assert_text_error(api.get("/jobs/job-404", headers=operator), 404, "job not found")


def test_the_root_sends_a_browser_to_the_ui(make_client: ClientFactory) -> None:
    """GET / (where a browser first goes) is the web UI, its login form until logged in;
    not an API call's 401. It reveals nothing: a redirect, whoever asks."""
    api = make_client(api_key=KEY)
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    landed = api.get("/", headers=browser, follow_redirects=False)
    assert (landed.status_code, landed.headers["location"]) == (303, "/ui")
    assert landed.content == b""
    assert 'name="key"' in api.get("/", headers=browser).text  # the login form
    # Any other client: no route, as before (a job id ".." is a URL library's "/").
    for accept in ("*/*", "application/json"):
        assert_text_error(api.get("/", headers={"Accept": accept}), 404, "404 page not found")
    assert api.post("/", json={}).status_code == 401  # another method: the key's, as before
