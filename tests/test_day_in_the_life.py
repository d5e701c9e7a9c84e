"""A day in the life of `scheduler up` (issue 36): the product as README's quickstart starts
it (embedded Redis, API, worker, its agent in token mode), and a user doing for a while what
README shows, between idle stretches while the agent polls: the CLI (submit, --wait, --delay,
--priority, status, list, cancel, retry, nodes, drain and undrain, a schedule that fires),
the HTTP API with the session's key, a team's named keys (a CI robot's submitter key, a
colleague's reader key: what each role may not do is a 403 the user meant, never a wrong
key; who submitted what; the audit), two teams' keys limited to their namespaces (each
team's job unknown to the other), the web UI (its login, every page, a Retry button, a
session that ends; and in a real browser a Cancel button, then the dashboard left open all
day, reloading itself), and the mistakes users make (a mistyped job id, a bad
--priority, a wrong status filter, a missing command). Every period that matters runs ten
times faster (tests/up_user.py, ACCELERATED): a minute of the test is ten minutes at the
defaults, long enough for the lock-out of issue 36 (the agent's GET /instances counted as a
wrong key each poll, locking out its own operator within minutes) to happen several times.

Throughout: no call the user got right is refused (401, 403, 429, 5xx), no mistake counts as
a wrong key, every job ends as it should with its output, and the API answered nobody (the
agent included) a refusal or a 5xx. At the end: Redis counts no wrong key for the user's
address, the log has no ERROR and no traceback, and Ctrl-C stops everything, exit status 0.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from scheduler.models.job import job_number
from tests.chromium import headless_chromium
from tests.client.test_readme import python_example
from tests.up_user import ACCELERATED, STEP_SECS, Said, Up, User, wait_for

# A stop's longest: the agent's grace + 15 s, the worker's 20 s, the API's 10 s, Redis's 30 s
# (cli/up.py stop_all and embedded_redis).
STOP_SECS = float(ACCELERATED["AGENT_GRACE_SECS"]) + 15 + 20 + 10 + 30
SESSION_SECS = float(ACCELERATED["UI_SESSION_SECS"])
POLL_SECS = float(ACCELERATED["AGENT_POLL_WAIT_SECS"])  # an idle agent's poll period
# The day, from the banner to the evening: 27 idle polls of the agent, 9 minutes of an agent
# at the defaults. A slow machine's longer morning makes a shorter afternoon.
DAY_SECS = 55.0
# A job's end as the user expects it: status, failure_reason, stdout.
Ending = tuple[str, str, str]
DONE_HELLO: Ending = ("done", "", "hello\n")
CANCELLED: Ending = ("failed", "cancelled", "")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    started = Up(tmp_path)
    yield started
    started.kill()  # after a failed test; a passing one has stopped it with Ctrl-C


@pytest.fixture
def user(up: Up) -> Iterator[User]:
    person = User(up)
    yield person
    person.close()


@pytest.fixture
def tab() -> Iterator[WebDriver]:
    browser = headless_chromium()
    yield browser
    browser.quit()


def submitted(said: Said) -> str:
    """The id in `submitted job-3 on node n1 (status=pending)`: on stdout, or on stderr
    with --wait (stdout is then the job's output)."""
    found = re.search(r"^submitted (job-\d+) ", said.out + said.err, re.MULTILINE)
    assert found, str(said)
    return found[1]


def flaky(flag: Path, code: int) -> str:
    """A command that fails (exit `code`) the first time and works once its cause is gone:
    what a user retries."""
    return f"test -e {flag} && echo recovered || {{ touch {flag}; exit {code}; }}"


def test_a_day_of_scheduler_up_refuses_its_user_nothing(
    up: Up, user: User, tab: WebDriver, tmp_path: Path
) -> None:
    ends: dict[str, Ending] = {}
    hello, node = first_steps(user, ends)
    morning_at_the_cli(user, hello, node, tmp_path, ends)
    watching(user, tmp_path, ends)
    mistakes(user, hello)
    through_the_api(user, ends)
    from_python(user, ends)
    a_team(user, ends)
    teams_apart(user, ends)
    login_at = in_the_browser(user, node, hello, tmp_path, ends)
    a_browser_tab(user, tab, ends)
    the_session_ends(user, login_at, node, hello)
    afternoon(user, day_ends=up.up_at + DAY_SECS)
    evening(user, tab, ends)

    logged = len(up.text())
    code = up.interrupt(timeout=STOP_SECS)  # Ctrl-C
    assert code == 0, f"`scheduler up` exited {code} on Ctrl-C:\n{up.text()[logged:]}"
    assert "did not stop in time" not in up.text(), up.text()[logged:]
    assert not up.problems(), "\n".join(up.problems()) + f"\n\n{up.text()}"


def first_steps(user: User, ends: dict[str, Ending]) -> tuple[str, str]:
    """README's first command, then a look at the node; then the user reads the docs."""
    said = user.cli("submit", "echo hello", "--wait")
    assert said.out.splitlines()[-1] == "hello", str(said)
    hello = submitted(said)
    ends[hello] = DONE_HELLO
    nodes = json.loads(user.cli("nodes", "--json").out)
    (node,) = nodes
    assert nodes[node]["status"] == "healthy", nodes
    user.idle(6, "after the first job")
    return hello, node


def morning_at_the_cli(
    user: User, hello: str, node: str, tmp_path: Path, ends: dict[str, Ending]
) -> None:
    """Delays, a failure and its retry, priorities, a cancel, lists, a drain, a schedule."""
    delayed = user.cli("submit", "echo later", "--delay", "3")
    assert "(status=delayed)" in delayed.out, str(delayed)
    later = submitted(delayed)
    ends[later] = ("done", "", "later\n")

    failing = submitted(user.cli("submit", "exit 3", "--max-retries", "0", "--wait", code=3))
    ends[failing] = ("failed", "", "")
    status = user.cli("status", failing, "--attempts")
    assert "exit_code=3" in status.out and f"{failing} attempt 1 on {node}: failed" in status.out

    fixed = submitted(
        user.cli("submit", flaky(tmp_path / "cli-flag", 4), "--max-retries", "0", "--wait", code=4)
    )
    assert user.cli("retry", fixed).out == f"retried: {fixed}\n"
    ends[fixed] = ("done", "", "recovered\n")

    # Long jobs hold every slot of the node (`up` runs as many at once as the machine has
    # cores); the urgent one submitted after the routine one runs first once they are
    # cancelled.
    longs = [submitted(user.cli("submit", "sleep 60")) for _ in range(os.cpu_count() or 1)]
    for long in longs:
        user.reaches(long, ("running",))
    routine = submitted(user.cli("submit", "echo routine"))
    urgent = submitted(user.cli("submit", "echo urgent", "--priority", "5"))
    for long in longs:
        user.cli("cancel", long)
    ends |= dict.fromkeys(longs, CANCELLED)
    ends |= {routine: ("done", "", "routine\n"), urgent: ("done", "", "urgent\n")}
    user.ended(urgent)
    user.ended(routine)
    first, second = (
        user.call("GET", f"/jobs/{job}/attempts").json()[0] for job in (urgent, routine)
    )
    assert first["started_at"] < second["started_at"], (first, second)

    listed = user.cli("list").out
    assert all(f"job_id={job_id} " in listed for job_id in ends), listed
    dead = user.cli("list", "--status", "failed").out
    assert {failing, *longs} <= set(re.findall(r"job_id=(\S+)", dead)), dead
    assert f"job_id={hello} " not in dead, dead

    added = user.cli("schedule", "add", "tick", "--every", "5", "echo tick")
    assert added.out.startswith("added schedule tick: every 5s"), str(added)

    assert "drained" in user.cli("drain", node).out
    assert "drained by operator" in user.cli("nodes").out
    parked = user.cli("submit", "echo parked")
    assert "pending_reason=drained" in parked.out, str(parked)
    ends[submitted(parked)] = ("done", "", "parked\n")
    assert "takes new jobs again" in user.cli("undrain", node).out
    user.idle(6, "a morning's jobs")


def watching(user: User, tmp_path: Path, ends: dict[str, Ending]) -> None:
    """A job's output followed while it runs (README's `logs -f`): its first line is there
    while the job still waits for the user, the whole output once it ends, and the follower
    exits with the job's exit code; its changes listed by `events`."""
    gate = tmp_path / "go-on"
    script = f"echo first; echo warn >&2; while [ ! -e {gate} ]; do sleep 0.1; done; echo last"
    job = submitted(user.cli("submit", f"{script}; exit 5", "--max-retries", "0"))
    ends[job] = ("failed", "", "first\nlast\n")
    first = ("logs", job, "--stream", "stdout")
    wait_for(f"{job}'s first line, live", lambda: user.cli(*first).out == "first\n")
    assert user.cli("logs", job, "--stream", "stderr").out == "warn\n"
    assert sorted(user.cli("logs", job).out.splitlines()) == ["first", "warn"]
    gate.touch()
    followed = user.cli("logs", "-f", job, code=5)
    assert (followed.out, followed.err) == ("first\nlast\n", "warn\n"), str(followed)
    changes = user.cli("events", "--job", job, "--since-start", "--no-follow").out
    moves = re.findall(r"(\S+) -> (\S+)", changes)
    assert moves == [("new", "pending"), ("pending", "running"), ("running", "failed")], changes


def mistakes(user: User, hello: str) -> None:
    """What users get wrong: each a clear 4xx (or usage error), none counted as a guess."""
    user.cli_wrong("status", "job-99999", code=1, says="error: job not found")
    user.cli_wrong("cancel", "job-99999", code=1, says="error: job not found")
    user.cli_wrong(
        "submit", "echo x", "--priority", "5000", code=1, says="error: --priority: must be"
    )
    user.cli_wrong("list", "--status", "finished", code=2, says="invalid choice: 'finished'")
    user.cli_wrong("submit", code=2, says="required: command")
    user.cli_wrong("submit", "", code=1, says="error: command or deploy_url is required")
    user.cli_wrong("retry", hello, code=1, says=f"error: {hello} is done, not failed")
    add_tick = ("schedule", "add", "tick", "--every", "5", "echo tick")
    user.cli_wrong(*add_tick, code=1, says="error: schedule already exists (409)")
    user.cli_wrong("drain", "no-such-node", code=1, says="error: node not found")
    user.cli_wrong("logs", "job-99999", code=1, says="error: job not found")
    user.cli_wrong("events", "--status", "finished", code=1, says="error: invalid status")
    user.call("GET", "/jobs/job-99999", 404)
    user.call("POST", "/jobs", 400, json={})
    user.call("POST", "/jobs", 400, json={"command": "echo x", "priority": 5000})
    user.call("POST", f"/jobs/{hello}/retry", 409)
    user.call("DELETE", "/schedules/no-such-schedule", 404)
    user.counts_nothing("the user's mistakes")


def through_the_api(user: User, ends: dict[str, Ending]) -> None:
    """A script of the user's, with the session's key."""
    job = user.call("POST", "/jobs", 201, json={"command": "echo api"}).json()
    ends[job["job_id"]] = ("done", "", "api\n")
    assert user.ended(job["job_id"])["stdout"] == "api\n"
    done = user.call("GET", "/jobs", params={"status": "done"}).json()
    assert job["job_id"] in [each["job_id"] for each in done]
    (attempt,) = user.call("GET", f"/jobs/{job['job_id']}/attempts").json()
    assert attempt["reason"] == "done"
    assert "tick" in user.call("GET", "/schedules").text
    user.call("GET", "/nodes")


# Several jobs at once from asyncio, each waited for (docs/CLIENT.md's second example).
ASYNC_SCRIPT = """
import asyncio
from scheduler.client import AsyncClient

async def main():
    async with AsyncClient.from_env() as client:
        jobs = await asyncio.gather(*(client.submit(f"echo py {n}") for n in range(3)))
        done = await asyncio.gather(*(client.wait(j.job_id, timeout=60) for j in jobs))
        print(" ".join(f"{d.job_id}={d.status}" for d in done))
        async for job in client.jobs(newest=True, page_size=2):
            print(job.job_id, job.status)
            break

asyncio.run(main())
"""


def from_python(user: User, ends: dict[str, Ending]) -> None:
    """README's Python example as the user runs it, then several jobs at once from asyncio:
    the Python client finds the session's key by itself, and counts as no wrong key."""
    said = user.python(python_example())
    assert said.out == "hello from Python\n", str(said)
    (made,) = [
        job["job_id"]
        for job in user.call("GET", "/jobs").json()
        if job["command"] == "echo hello from Python"
    ]
    ends[made] = ("done", "", "hello from Python\n")
    first, newest = user.python(ASYNC_SCRIPT).out.splitlines()
    ended = dict(pair.split("=") for pair in first.split())
    assert set(ended.values()) == {"done"} and len(ended) == 3, first
    for job_id in ended:
        ends[job_id] = ("done", "", user.job(job_id)["command"].removeprefix("echo ") + "\n")
    # The newest job: one of these, or one the schedule made since (its ticks go on).
    number = {job_id: job_number(job_id) or 0 for job_id in [*ended, newest.split()[0]]}
    assert number[newest.split()[0]] >= max(number[job_id] for job_id in ended), newest
    user.counts_nothing("the Python client's calls")


def a_team(user: User, ends: dict[str, Ending]) -> None:
    """The operator gives a CI robot a submitter's key and a colleague a reader's: each does
    what its role allows; what it does not is a 403 naming the role, never a wrong key; every
    job says which key made it, and the reader sees env_vars by name only."""
    ci = user.cli("key", "add", "ci", "--role", "submitter").out.strip()
    viewer = user.cli("key", "add", "viewer", "--role", "reader").out.strip()
    said = user.cli("submit", "echo from ci $TOKEN", "--env", "TOKEN=s3cret", "--wait", key=ci)
    assert said.out.splitlines()[-1] == "from ci s3cret", str(said)
    job = submitted(said)
    ends[job] = ("done", "", "from ci s3cret\n")
    seen = json.loads(user.cli("status", job, "--json", key=viewer).out)
    assert (seen["submitted_by"], seen["env_vars"]) == ("ci", {"TOKEN": "(hidden)"}), seen
    assert user.job(job)["env_vars"] == {"TOKEN": "s3cret"}  # the admin key sees it
    user.cli_forbidden("submit", "echo x", key=viewer, route="403 POST /jobs", needs="submitter")
    user.cli_forbidden("key", "list", key=ci, route="403 GET /keys", needs="admin")
    listed = user.cli("key", "list").out
    assert re.search(r"^ci +submitter ", listed, re.MULTILINE), listed
    user.cli("key", "revoke", "viewer")
    audit = user.cli("key", "audit", "--limit", "3").out.splitlines()
    assert [line.split()[3:6] for line in audit[1:]] == [
        ["revoke", "viewer", "reader"],
        ["add", "viewer", "reader"],
        ["add", "ci", "submitter"],
    ], audit
    user.counts_nothing("the team's keys")


def teams_apart(user: User, ends: dict[str, Ending]) -> None:
    """Two teams share the fleet, each with a key limited to its namespace: a team's job goes
    to its namespace, runs on the same agent, and is the other team's to neither see, list
    nor cancel (not found, as a job that does not exist, never a 403 that says it exists);
    the admin key sees both."""
    team_a = user.cli("key", "add", "team-a", "--role", "submitter", "--namespace", "team-a")
    team_b = user.cli("key", "add", "team-b", "--role", "submitter", "--namespace", "team-b")
    a_key, b_key = team_a.out.strip(), team_b.out.strip()
    said = user.cli("submit", "echo from team-a", "--wait", key=a_key)
    job = submitted(said)
    ends[job] = ("done", "", "from team-a\n")
    seen = json.loads(user.cli("status", job, "--json", key=a_key).out)
    assert (seen["namespace"], seen["submitted_by"]) == ("team-a", "team-a"), seen
    for argv in (("status", job), ("cancel", job), ("logs", job)):
        hidden = user.run(*argv, key=b_key)
        assert hidden.code == 1 and "404" in hidden.err and "not found" in hidden.err, hidden
    assert job not in user.cli("list", key=b_key).out
    assert job in user.cli("list", key=a_key).out
    assert job in user.cli("list", "--namespace", "team-a").out  # the admin key's
    assert user.job(job)["status"] == "done"  # the other team's cancel changed nothing
    user.counts_nothing("the teams' namespaces")


def in_the_browser(
    user: User, node: str, hello: str, tmp_path: Path, ends: dict[str, Ending]
) -> float:
    """The web UI as a script sees it: the login form, every page, a Retry button. Returns
    when the session started (time.monotonic())."""
    user.log_in()
    login_at = time.monotonic()
    user.page("/ui", says="Throughput")
    user.page("/ui/jobs", says=hello)
    user.page(f"/ui/jobs/{hello}", says="hello")
    user.page("/ui/nodes", says=node)
    user.page("/ui/schedules", says="tick")
    user.page("/ui/jobs?status=failed", says="Retry these")
    user.page("/ui/jobs/job-99999", 404)
    user.page("/ui/jobs?status=finished", 400)

    body = {"command": flaky(tmp_path / "ui-flag", 5), "max_retries": 0}
    fixed = user.call("POST", "/jobs", 201, json=body).json()["job_id"]
    assert user.ended(fixed)["exit_code"] == 5
    user.press(f"/ui/jobs/{fixed}", f"/ui/jobs/{fixed}/retry")
    ends[fixed] = ("done", "", "recovered\n")
    assert user.ended(fixed)["stdout"] == "recovered\n"
    user.page(f"/ui/jobs/{fixed}", says="recovered")
    return login_at


def a_browser_tab(user: User, tab: WebDriver, ends: dict[str, Ending]) -> None:
    """The web UI in a real browser (its own Origin and Sec-Fetch headers on a form): the
    login, a Cancel button, then the dashboard left open, reloading itself every 5 s."""
    tab.get(f"{user.url}/ui")
    WebDriverWait(tab, STEP_SECS).until(lambda _: tab.current_url == f"{user.url}/ui/login")
    tab.find_element(By.ID, "key").send_keys(user.key)
    tab.find_element(By.ID, "login").click()
    WebDriverWait(tab, STEP_SECS).until(lambda _: tab.current_url == f"{user.url}/ui")

    long = user.call("POST", "/jobs", 201, json={"command": "sleep 60"}).json()["job_id"]
    user.reaches(long, ("running",))
    tab.get(f"{user.url}/ui/jobs/{long}")
    tab.find_element(By.ID, "cancel-ask").click()  # the question first, then its button
    tab.find_element(By.ID, "cancel").click()
    ends[long] = CANCELLED
    assert user.ended(long)["failure_reason"] == "cancelled"
    # The page the button led back to follows the job's output, and shows its record (its
    # live section gone) once the job ended; then the user goes to the dashboard.
    WebDriverWait(tab, STEP_SECS).until(lambda _: not tab.find_elements(By.ID, "live"))
    tab.get(f"{user.url}/ui")
    assert "Throughput" in tab.page_source


def the_session_ends(user: User, login_at: float, node: str, hello: str) -> None:
    """Lunch: the login ends (UI_SESSION_SECS); the Drain button of the page left open sends
    the user to the login form, draining nothing and counting nothing; the user logs in
    again."""
    token = user.token(user.page("/ui/nodes", says=node))
    user.idle(max(0.0, login_at + SESSION_SECS + 1 - time.monotonic()), "past the UI session")
    response = user.browser.get("/ui/jobs")
    assert (response.status_code, response.headers.get("location")) == (303, "/ui/login")
    pressed = user.browser.post(f"/ui/nodes/{node}/drain", data={"csrf": token})
    assert (pressed.status_code, pressed.headers.get("location")) == (303, "/ui/login")
    assert "drained" not in user.call("GET", "/nodes").json()[node]
    user.counts_nothing("a page used past its session")
    user.log_in()
    user.page("/ui/jobs", says=hello)


def afternoon(user: User, day_ends: float) -> None:
    """Only the schedule works; the user looks in now and then, until the day ends."""
    user.idle(max(POLL_SECS, (day_ends - time.monotonic()) / 2), "the schedule alone at work")
    ticks = user.cli("list", "--status", "done", "--newest", "--limit", "3").out
    assert 'command="echo tick"' in ticks, ticks
    user.page("/ui", says="Throughput")
    user.idle(max(POLL_SECS, day_ends - time.monotonic()), "the schedule alone at work")
    user.page("/ui/schedules", says="job-")


def evening(user: User, tab: WebDriver, ends: dict[str, Ending]) -> None:
    """The schedule is deleted; every job has ended as it should; the tab left open has
    reloaded itself into the login form once its session ended."""
    shown = json.loads(user.cli("schedule", "show", "tick").out)
    assert "tick" in user.cli("schedule", "list").out
    user.cli("schedule", "delete", "tick")
    ticks = [
        job["job_id"] for job in user.call("GET", "/jobs").json() if job["command"] == "echo tick"
    ]
    assert shown["last_job_id"] in ticks, (shown, ticks)
    ends |= {tick: ("done", "", "tick\n") for tick in ticks}
    for job_id, (status, reason, stdout) in ends.items():
        job = user.ended(job_id)
        got = (job["status"], job.get("failure_reason", ""), job.get("stdout", ""))
        assert got == (status, reason, stdout), f"{job_id}: {job}"
    every = user.call("GET", "/jobs").json()
    assert sorted(job["job_id"] for job in every) == sorted(ends), every
    # The day's events: every job made once and ended (a retry by hand ends it again), each
    # event numbered once, in order.
    day = [
        json.loads(line)
        for line in user.cli("events", "--since-start", "--no-follow", "--json").out.splitlines()
    ]
    made = sorted(e["job_id"] for e in day if not e.get("old_status"))
    ended = sorted(e["job_id"] for e in day if e["status"] in ("done", "failed"))
    assert made == sorted(set(ended)) == sorted(ends), (made, ended)
    numbers = [e["number"] for e in day]
    assert numbers == sorted(set(numbers)), numbers
    user.cli("list", "--newest")
    wait_for("the tab's session ends", lambda: tab.current_url == f"{user.url}/ui/login")
    user.counts_nothing("the day")
    assert not user.refusals(), f"the API refused or failed: {user.refusals()}"
