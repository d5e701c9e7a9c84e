"""A job's page (issue 38): what happened first (status as people say it, reason, exit code,
how long it ran, the end of its error output), then its attempts, then the request with its
empty fields left out, then its output once; every value escaped."""

from __future__ import annotations

import re
import time
from html import escape, unescape

import msgspec
import pytest
from starlette.testclient import TestClient

from scheduler.api.ui_attempts import attempts_section
from scheduler.api.ui_job import (
    TAIL_LINES,
    command_block,
    output_section,
    reason,
    request_rows,
    split_tail,
    summary_rows,
)
from scheduler.api.ui_layout import View
from scheduler.models import unplaced
from scheduler.models.attempt import Attempt
from scheduler.models.job import Job
from scheduler.models.namespace import scope_text
from scheduler.models.queue_place import QueuePlace
from scheduler.models.wire import parse_rfc3339
from scheduler.store import ops
from scheduler.store.errors import JobNotFound
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
    return re.findall(r'<h2>([A-Za-z ]+)|id="(summary|output|request|stdout|stderr)"', page)


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
    # Its output once, at the top: the error first, its end in view, the lines before it
    # folded just above it (each byte once); then the attempts, then the request.
    tail = re.search(r'<pre id="stderr" class="stderr">(.*?)</pre>', page, re.S)
    assert tail and unescape(tail.group(1)).splitlines() == stderr.splitlines()[-TAIL_LINES:]
    head = re.search(r'<details class="head" id="stderr-head">.*?<pre[^>]*>(.*?)</pre>', page, re.S)
    assert head and unescape(head.group(1)) + unescape(tail.group(1)) == stderr
    order = [heading or ident for heading, ident in sections(page)]
    assert order.index("output") < order.index("stderr") < order.index("stdout")
    assert order.index("stdout") < order.index("Attempts") < order.index("request")
    assert page.count("line 0\n") == 1 and page.count("ok\n") == 1  # the output once
    assert page.count("ValueError") == 1
    # The attempt that ended it links to that output rather than repeating it.
    attempts = re.search(r'<table class="cards" id="attempts">(.*?)</table>', page, re.S)
    assert attempts and '<a href="#output">' in attempts.group(1)
    # The request: only what was set, names in words, env var values never.
    request = table(page, "request")
    assert list(request) == ["environment", "type", "cpus"]  # the command is at the top
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
    assert 'id="stdout-empty"' in page and 'id="stderr-empty"' in page  # no output: said so


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
    assert due(later) is None  # delayed: its reason says when it runs, once
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
    assert page.count("boom") == 1 and '<h3>stderr</h3><pre id="stderr" class="stderr">' in page
    assert "stderr-head" not in page and "above" not in page.partition("<h2>Attempts")[0]
    assert 'id="stdout-empty"' in page  # an ended job: its empty output said


def test_each_output_once_with_the_others_linking_to_it(make_client: ClientFactory) -> None:
    """The newcomer's job-4: two failed attempts with the same output. The job's output in
    one place (its section, near the top); the last attempt links there; the first
    attempt's own output is folded in its row; nothing says "shown in full above"."""
    api = make_client(max_job_retries=1)
    register(api, "n1")
    job_id = submit(api, command="x")["job_id"]
    for _ in range(2):
        assert report(api, job_id, "running").is_success
        ended = report(api, job_id, "failed", exit_code=3, stdout="out 1\n", stderr="err 1\n")
        assert ended.is_success
    page = api.get(f"/ui/jobs/{job_id}").text
    output = re.search(r'<section id="output">(.*?)</section>', page, re.S)
    assert output and "out 1" in output.group(1) and "err 1" in output.group(1)
    rest = page.replace(output.group(0), "")
    attempts = re.search(r'<table class="cards" id="attempts">(.*?)</table>', rest, re.S)
    assert attempts and rest.count("out 1") == rest.count("err 1") == 1  # attempt 1's, once
    first, last = attempts.group(1).split('<tr id="attempt-2">')
    assert re.search(r"<details><summary>attempt 1's output \(stdout, stderr\)</summary>", first)
    assert '<a href="#output">' in last and "<pre" not in last
    assert "shown in full above" not in page and "-above" not in page


def test_a_long_output_keeps_every_byte_once() -> None:
    text = "".join(f"{i}\n" for i in range(100)) + "no newline at the end"
    head, tail = split_tail(text)
    assert head + tail == text and tail.count("\n") == TAIL_LINES - 1
    section = output_section(Job(job_id="job-1", node_id="n1", command="x", status="done",
        retry_count=0, created_at="2026-01-01T00:00:00.000000Z", stdout=text))  # fmt: skip
    assert unescape(re.sub(r"<[^>]+>", "", section)).count("\n99\n") == 1
    assert "86 earlier line(s)" in section


def test_a_delayed_job_says_when_it_is_due_in_its_reason_once(client: TestClient) -> None:
    register(client, "n1")
    job_id = submit(client, command="true", delay_secs=16)["job_id"]
    page = client.get(f"/ui/jobs/{job_id}").text
    run_at = client.get(f"/jobs/{job_id}").json()["run_at"]
    clock = time.strftime("%H:%M:%S UTC", time.gmtime(parse_rfc3339(run_at)))
    said = table(page, "summary")["reason"]
    assert re.fullmatch(rf"due in \d+ s, at {clock}", said), said  # 16 s, fewer on a slow machine
    assert "due at" not in table(page, "request") and "not due yet" not in page
    # Read at other times: past due (the worker queues it at its next pass), another day.
    stamp = "2026-01-02T03:04:05.000000Z"
    job = Job(job_id="job-1", node_id="n1", command="x", status="delayed", retry_count=0,
              created_at="2026-01-01T00:00:00.000000Z", run_at=stamp)  # fmt: skip
    due_at = parse_rfc3339(stamp)
    assert reason(job, View(paused=False, now=due_at + 1)) == (
        "due since 03:04:05 UTC: it is queued any moment"
    )
    ahead = re.sub(r"<[^>]+>", "", reason(job, View(paused=False, now=due_at - 86400 * 2)))
    assert ahead == "due in 2 d, at 2026-01-02 03:04:05 UTC"


def test_a_job_not_started_says_so_once_and_no_empty_attempts(make_client: ClientFactory) -> None:
    api = make_client(max_job_retries=1)
    register(api, "n1")
    job_id = submit(api, command="false")["job_id"]
    page = api.get(f"/ui/jobs/{job_id}").text
    assert "<h2>Output as it runs " in page and "not started yet" not in page
    assert "<h2>Attempts" not in page and "none ended" not in page
    report(api, job_id, "running")
    report(api, job_id, "failed", exit_code=1)  # retried: one attempt ended
    page = api.get(f"/ui/jobs/{job_id}").text
    assert "<h2>Attempts" in page and 'id="attempt-1"' in page


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


def test_the_command_shows_once_under_the_heading(client: TestClient) -> None:
    """What the job runs comes first, whole and escaped, not again in the request below
    (one fact, one place); a deploy job, which runs no command, shows none."""
    register(client, "n1")
    command = "python3 etl.py --from <a> " + "x" * 3000 + " && echo 'done'"
    job_id = submit(client, command=command, env_vars={"A": "1"})["job_id"]
    report(client, job_id, "running")
    report(client, job_id, "done", exit_code=0, stdout="out\n")
    page = client.get(f"/ui/jobs/{job_id}").text
    shown = re.search(r'<pre id="command" class="command"[^>]*>(.*?)</pre>', page, re.S)
    assert shown and unescape(shown.group(1)) == command
    assert page.index('id="command"') < page.index('id="summary"') < page.index('id="output"')
    assert page.count(escape(command)) == 1 and "command" not in table(page, "request")
    deploy = Job(job_id="job-9", node_id="n1", command="", status="pending", retry_count=0,
                 created_at="2026-01-01T00:00:00.000000Z", job_type="deploy",
                 deploy_url="https://example.com/app.tgz")  # fmt: skip
    assert command_block(deploy) == ""
    assert "command" not in dict(request_rows(deploy, View(paused=False, now=0.0)))


def tail_of(text: str) -> str:
    return split_tail(text)[1].rstrip("\n")


def test_the_tail_is_the_last_lines_within_a_bound() -> None:
    assert split_tail("a\nb\nc\n") == ("", "a\nb\nc\n")
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


def test_a_pending_reason_is_said_once_in_words() -> None:
    """`pending no_fit` then `reason … no_fit` said it twice, once as a code: the status
    row is the status alone, the reason row the words (unplaced.why), the code on hover."""
    job = Job(job_id="job-1", node_id="", command="x", status="pending", retry_count=0,
              created_at="2026-01-01T00:00:00.000000Z", pending_reason="no_fit",
              cpus=64)  # fmt: skip
    rows = dict(summary_rows(job, View(paused=False, now=0.0), 1))
    assert rows["status"] == '<span class="st pending">pending</span>'
    words = unplaced.why("no_fit", cpus=64, memory_mb=None, node_selector={}, namespace="")
    assert rows["reason"] == f'<span class="why" title="no_fit">{escape(words)}</span>'
    assert "".join(rows.values()).count("no_fit") == 1  # the hover's, only


def test_a_cancel_says_by_whom_in_plain_words() -> None:
    job = Job(job_id="job-1", node_id="", command="x", status="failed", retry_count=0,
              created_at="2026-01-01T00:00:00.000000Z", failure_reason="cancelled",
              cancelled_by="<alice>")  # fmt: skip
    assert (
        reason(job, View(paused=False, now=0.0))
        == '<span class="why" title="cancelled">cancelled on request by &lt;alice&gt;</span>'
    )
    assert "cancelled by" not in dict(request_rows(job, View(paused=False, now=0.0)))


def test_attempts_sharing_a_number_make_no_duplicate_id() -> None:
    """A retry by hand restarted the numbering (fixed in the store): two attempts 1. The
    rows' ids are their places, so the page never holds one id twice."""
    blobs = [
        msgspec.json.encode(Attempt(attempt=1, node_id="n1", reason="failed", ended_at=when))
        for when in ("2026-01-01T00:00:00.000000Z", "2026-01-01T00:01:00.000000Z")
    ]
    section = attempts_section(blobs, View(paused=False, now=0.0))
    ids = re.findall(r'id="([^"]+)"', section)
    assert len(ids) == len(set(ids)) and ids[1:] == ["attempt-1", "attempt-2"]
    assert [cell for cell in re.findall(r'data-label="attempt">(\d+)<', section)] == ["1", "1"]


def test_a_pending_job_says_its_place_in_its_queue(client: TestClient) -> None:
    """Three jobs queued on n1: each page says how many wait before it; once the first
    runs, it has left the queue and the others moved up. A job no node can take waits
    among the jobs waiting for a node, and says so."""
    register(client, "n1")
    ids = [submit(client, command=f"echo {i}")["job_id"] for i in range(3)]

    def place(job_id: str) -> str | None:
        return table(client.get(f"/ui/jobs/{job_id}").text, "summary").get("in queue")

    assert [place(i) for i in ids] == [
        "first in the queue of n1 (3 queued)",
        "1 ahead of it in the queue of n1 (3 queued)",
        "2 ahead of it in the queue of n1 (3 queued)",
    ]
    assert report(client, ids[0], "running").status_code == 200
    assert place(ids[0]) is None  # running: in no queue
    assert place(ids[2]) == "1 ahead of it in the queue of n1 (2 queued)"
    urgent = submit(client, command="echo now", priority=5)["job_id"]
    assert place(urgent) == "first in the queue of n1 (3 queued)"  # priority first
    unplaceable = submit(client, command="echo x", node_selector={"gpu": "yes"})["job_id"]
    assert place(unplaceable) == "first in the jobs waiting for a node (1 queued)"
    # The same through the API, for the CLI's status: {} in no queue; an unknown job a 404.
    assert client.get(f"/jobs/{ids[2]}/place").json() == {"ahead": 2, "queued": 3}  # urgent too
    assert client.get(f"/jobs/{ids[0]}/place").json() == {}
    assert client.get("/jobs/job-999/place").status_code == 404


def test_another_namespaces_job_has_no_queue_place_to_read(
    client: TestClient, store: SyncJobStore
) -> None:
    """The place is read under the caller's namespaces, as the attempts are: a job of
    another namespace is one that does not exist."""
    register(client, "n1")
    job_id = submit(client, command="echo hi")["job_id"]
    assert store.run(ops.jobs.queue_place(job_id, scope_text(("",)))) == QueuePlace(
        ahead=0, queued=1
    )
    with pytest.raises(JobNotFound):
        store.run(ops.jobs.queue_place(job_id, scope_text(("team-a",))))
    with pytest.raises(JobNotFound):
        store.run(ops.jobs.queue_place("job-999"))
