"""A job's page (issue 38): what happened first (status as people say it, reason, exit code,
how long it ran, the end of its error output), then its attempts, then the request with its
empty fields left out, then its output once; every value escaped."""

from __future__ import annotations

import re
import time
from html import unescape

from starlette.testclient import TestClient

from scheduler.api.ui_job import TAIL_LINES, summary_rows, tail_of
from scheduler.api.ui_layout import View
from scheduler.models.job import Job
from scheduler.store import ops
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, register, report, submit


def table(page: str, table_id: str) -> dict[str, str]:
    """The rows of the table `table_id` as {heading: the cell's text}, in order."""
    found = re.search(rf'<table class="fields" id="{table_id}">(.*?)</table>', page, re.S)
    assert found, table_id
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", found.group(1), re.S)
    return {name: unescape(re.sub(r"<[^>]+>", "", cell)) for name, cell in rows}


def sections(page: str) -> list[str]:
    """The page's headings and ids of what it draws, in order."""
    return re.findall(r'<h2>([A-Za-z ]+)|id="(summary|tail|request|stdout|stderr)"', page)


def test_a_failed_job_leads_with_what_happened(make_client: ClientFactory) -> None:
    api = make_client(max_job_retries=0)
    register(api, "n1")
    stderr = "".join(f"line {i}\n" for i in range(40)) + "ValueError: bad input\n"
    job = submit(api, command="python3 etl.py", cpus=1, env_vars={"TOKEN": "hunter2"})
    assert report(api, job["job_id"], "running").status_code == 200
    ended = report(api, job["job_id"], "failed", exit_code=3, stdout="ok\n", stderr=stderr)
    assert ended.status_code == 200
    page = api.get(f"/ui/jobs/{job['job_id']}").text
    summary = table(page, "summary")
    assert list(summary) == [
        "status", "reason", "exit code", "ran for", "node", "attempts", "submitted", "started",
        "finished",
    ]  # fmt: skip
    assert (summary["status"], summary["reason"]) == ("failed", "the command exited with code 3")
    assert (summary["exit code"], summary["node"], summary["attempts"]) == ("3", "n1", "1")
    # The end of stderr at the top, before the attempts; all of it once, below.
    tail = re.search(r'<pre id="tail" class="stderr">(.*?)</pre>', page, re.S)
    assert tail and unescape(tail.group(1)).splitlines() == stderr.splitlines()[-TAIL_LINES:]
    order = [heading or ident for heading, ident in sections(page)]
    assert order.index("tail") < order.index("Attempts") < order.index("request")
    assert order.index("request") < order.index("stderr")
    assert page.count("line 0\n") == 1 and page.count("ok\n") == 1  # the output once
    # The request: only what was set, names in words, env var values never.
    request = table(page, "request")
    assert list(request) == ["command", "environment", "type", "cpus"]
    assert request["environment"] == "TOKEN (values hidden)" and "hunter2" not in page
    assert "_" not in "".join(summary) + "".join(request)  # no snake_case names


def test_a_cancelled_job_reads_cancelled(client: TestClient) -> None:
    register(client, "n1")
    job_id = submit(client, command="sleep 60")["job_id"]
    assert client.delete(f"/jobs/{job_id}").status_code == 200
    page = client.get(f"/ui/jobs/{job_id}").text
    summary = table(page, "summary")
    assert summary["status"] == "cancelled" and summary["reason"].startswith("cancelled on")
    assert ">failed<" not in page  # the wire's status is not shown beside it
    row = re.search(r"<tr><td[^>]*><a [^>]*>job-1</a>.*?</tr>", client.get("/ui/jobs").text)
    assert row and '<span class="st cancelled">cancelled</span>' in row.group(0)
    assert ">failed<" not in row.group(0)
    assert 'id="tail"' not in page and 'id="stdout-empty"' in page  # no output: said so


def test_of_how_many_only_while_more_attempts_may_come(make_client: ClientFactory) -> None:
    """An unfinished job says its attempt of how many its retries allow; an ended one how
    many it made ("1 of 2" on a done job read as if a second were coming); a job that never
    ran, that none did."""
    api = make_client(max_job_retries=1)
    register(api, "n1")

    def attempt(job_id: str) -> dict[str, str]:
        summary = table(api.get(f"/ui/jobs/{job_id}").text, "summary")
        return {name: summary[name] for name in ("attempt", "attempts") if name in summary}

    done = submit(api, command="true")["job_id"]
    assert attempt(done) == {"attempt": "1 of 2"}  # pending
    assert report(api, done, "running").status_code == 200
    assert attempt(done) == {"attempt": "1 of 2"}
    assert report(api, done, "done", exit_code=0).status_code == 200
    assert attempt(done) == {"attempts": "1"}
    flaky = submit(api, command="false")["job_id"]
    assert report(api, flaky, "running").status_code == 200
    assert report(api, flaky, "failed", exit_code=1).status_code == 200  # retried
    assert attempt(flaky) == {"attempt": "2 of 2"}
    assert report(api, flaky, "running").status_code == 200
    assert report(api, flaky, "failed", exit_code=1).status_code == 200
    assert attempt(flaky) == {"attempts": "2"}
    # A retry by hand gives its retries again and numbers on: attempt 3 of 4, not 1 of 2.
    assert api.post(f"/jobs/{flaky}/retry").status_code == 200
    assert attempt(flaky) == {"attempt": "3 of 4"}
    never = submit(api, command="sleep 1")["job_id"]
    assert api.delete(f"/jobs/{never}").status_code == 200
    assert attempt(never) == {"attempts": "none ran"}


def test_due_at_shows_only_a_due_time_that_matters(client: TestClient, store: SyncJobStore) -> None:
    """A delayed job's due time, and the one a submit asked for, show; the run_at the record
    keeps for the dashboard's wait (a dependency's release, a retry by hand) does not: those
    jobs were never delayed."""
    register(client, "n1")

    def due(job_id: str) -> str | None:
        return table(client.get(f"/ui/jobs/{job_id}").text, "request").get("due at")

    def ran(job_id: str, status: str) -> None:
        assert report(client, job_id, "running").status_code == 200
        assert report(client, job_id, status, exit_code=0 if status == "done" else 1).is_success

    later = submit(client, command="true", delay_secs=60)["job_id"]
    assert due(later)  # delayed: when it runs
    assert store.run(ops.upkeep.promote_due(time.time() + 61)) == [later]
    ran(later, "done")
    assert due(later)  # what its submit asked
    first = submit(client, command="true")["job_id"]
    then = submit(client, command="true", after=[first])["job_id"]
    ran(first, "done")  # `then` released: its run_at is when
    assert due(then) is None
    ran(then, "done")
    assert due(first) is None and due(then) is None
    again = submit(client, command="false", max_retries=0)["job_id"]
    ran(again, "failed")
    assert client.post(f"/jobs/{again}/retry").is_success  # no key: no retried_by
    assert due(again) is None
    ran(again, "done")
    assert due(again) is None


def test_a_whole_short_stderr_shows_once_at_the_top(client: TestClient) -> None:
    register(client, "n1")
    job_id = submit(client, command="x", max_retries=0)["job_id"]
    report(client, job_id, "running")
    report(client, job_id, "failed", exit_code=1, stderr="boom\n")
    page = client.get(f"/ui/jobs/{job_id}").text
    assert page.count("boom") == 1 and 'id="stderr-above"' in page
    assert "<h2>stderr</h2>" in page  # all of it: no "End of"


def test_what_the_job_page_shows_first_is_escaped(client: TestClient) -> None:
    """The summary, the tail, the attempts and the request each show text a user sent."""
    register(client, "n1")
    attack = "<script>alert(1)</script>"
    job_id = submit(client, command=attack, max_retries=1, env_vars={"A": attack})["job_id"]
    for _ in range(2):
        report(client, job_id, "running")
        report(client, job_id, "failed", exit_code=1, stdout=attack, stderr=f"{attack}\n{attack}")
    page = client.get(f"/ui/jobs/{job_id}").text
    assert "<script>" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4  # command, tail, outputs


def test_the_tail_is_the_last_lines_within_a_bound() -> None:
    assert tail_of("a\nb\nc\n") == "a\nb\nc"
    assert tail_of("".join(f"{i}\n" for i in range(100))).split("\n")[0] == str(100 - TAIL_LINES)
    assert len(tail_of("x" * 10_000)) == 3000


def test_no_request_can_say_a_schedule_made_its_job(client: TestClient) -> None:
    """`schedule` is the firing's to set (workers/firing.py; tests/workers/test_firing.py
    shows it on the page): POST /jobs refuses it as an unknown field, making nothing, and a
    job without one shows none."""
    register(client, "n1")
    refused = client.post("/jobs", json={"command": "x", "schedule": "nightly"})
    assert (refused.status_code, refused.text) == (
        400,
        "failed to decode job: schedule: unknown field\n",
    )
    job = submit(client, command="x")
    assert job["job_id"] == "job-1"  # the refused one took no id
    assert "schedule" not in client.get(f"/jobs/{job['job_id']}").json()
    assert "made by" not in client.get(f"/ui/jobs/{job['job_id']}").text


def test_a_schedules_name_is_escaped_on_the_page() -> None:
    """Schedule names are ids (models/schedule.py), but a record restored from elsewhere
    may hold anything: the summary escapes it like every value."""
    job = Job(job_id="job-1", node_id="n1", command="x", status="pending", retry_count=0,
              created_at="2026-01-01T00:00:00.000000Z", schedule="<script>x</script>")  # fmt: skip
    rows = dict(summary_rows(job, View(paused=False, now=0.0), 1))
    assert "<script>" not in rows["made by"] and "&lt;script&gt;x&lt;/script&gt;" in rows["made by"]


def test_a_taken_job_says_where_it_waited_and_why_it_left(make_client: ClientFactory) -> None:
    """Work stealing: the page names the node whose queue the job was taken from."""
    api = make_client(max_jobs_per_node=1)
    register(api, "a")
    first, second = submit(api, command="one"), submit(api, command="two<b>")
    register(api, "b")
    named = {"node_id": "a", "status": "pending", "claims": "named", "capacity": "1"}
    assert api.get("/jobs", params=named).json()[0]["job_id"] == first["job_id"]
    assert api.get("/jobs", params={"node_id": "b", "status": "pending"}).json()
    summary = table(api.get(f"/ui/jobs/{second['job_id']}").text, "summary")
    assert summary["node"].startswith("b taken from the queue of a, where it waited while")
    assert summary["reason"].startswith("waited in the queue of a node with no room for it")
    assert report(api, second["job_id"], "running").status_code == 200
    summary = table(api.get(f"/ui/jobs/{second['job_id']}").text, "summary")
    assert "taken from the queue of a" in summary["node"] and "reason" not in summary
