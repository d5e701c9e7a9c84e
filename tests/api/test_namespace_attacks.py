"""Issue 41, namespaces (item 5, the attacks): a key limited to team-a tries team-b's jobs and
schedules by id. Each attack is answered exactly as the same call naming an id or a name that
does not exist (status, body, headers' type), and changes nothing; the same calls on team-a's
own are served, and the admin key is served on both. Jobs through ASGI and the hot lane
(tests/conftest.py, front); `after` is universal: no job runs after another namespace's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, cast

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.models.access_key import Principal, Role
from scheduler.models.namespace import script_scope
from scheduler.models.schedule import schedule_decoder
from scheduler.nodes.registry import BuiltinRegistry
from scheduler.store.keys import Keys
from tests.api.test_namespaces import ADMIN, ADMIN_KEY, make_key, submit
from tests.api.test_roles import as_key
from tests.conftest import BOTH_FRONTS, ClientFactory, CtxFactory, assert_json
from workers import firing

SECRET = {"DB_PASSWORD": "hunter2"}
UNKNOWN = "job-999"

Teams = tuple[TestClient, dict[str, str]]


@pytest.fixture
def teams(make_client: ClientFactory) -> Teams:
    """An API with the admin key and node n1; job-1 (team-a) and job-2 (team-b) failed,
    job-3 (team-a) and job-4 (team-b) pending, each with a secret env var; key `a`, an
    operator limited to team-a: (client, its Authorization header)."""
    api = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 8, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=ADMIN), 201)
    for team in ("team-a", "team-b"):
        submit(api, ADMIN, namespace=team, env_vars=SECRET, max_retries=0)
    for job_id in ("job-1", "job-2"):
        assert_json(api.patch(f"/jobs/{job_id}", json={"status": "running"}))
        report = {"status": "failed", "exit_code": 2, "stdout": "out of " + job_id}
        assert_json(api.patch(f"/jobs/{job_id}", json=report))
    for team in ("team-a", "team-b"):
        submit(api, ADMIN, namespace=team, env_vars=SECRET)
    return api, as_key(make_key(api, "a", "operator", ["team-a"]))


def answer(response: Any) -> tuple[int, str, str]:
    """What a caller learns from an answer: its status, type and body."""
    return response.status_code, response.headers["content-type"], response.text


def said_of(response: Any, job_id: str) -> tuple[int, str, str]:
    """The answer to a call naming UNKNOWN, as it reads for `job_id` (an answer that names
    the job it could not find: `after`'s 400, a bulk retry's not_found)."""
    status, kind, text = answer(response)
    return status, kind, text.replace(UNKNOWN, job_id)


def as_unknown(api: TestClient, method: str, path: str, key: dict[str, str], **kw: Any) -> Any:
    """The same call with every job-2 named UNKNOWN instead, as `key`."""
    path = path.replace("job-2", UNKNOWN)
    if "json" in kw:
        kw["json"] = _renamed(kw["json"])
    return api.request(method, path, headers=key, **kw)


def _renamed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return UNKNOWN if value == "job-2" else value


def world(api: TestClient) -> Any:
    """Everything a call could change, as the admin key reads it."""
    jobs = assert_json(api.get("/jobs", headers=ADMIN))
    attempts = {
        j["job_id"]: api.get(f"/jobs/{j['job_id']}/attempts", headers=ADMIN).json() for j in jobs
    }
    schedules = assert_json(api.get("/schedules", headers=ADMIN))
    return jobs, attempts, schedules


# The calls naming a job by id: (method, path, body).
JOB_CALLS = [
    ("GET", "/jobs/job-2", None),
    ("GET", "/jobs/job-2?wait=1", None),
    ("GET", "/jobs/job-2?wait=60&status_not=failed", None),
    ("GET", "/jobs/job-2/attempts", None),
    ("GET", "/jobs/job-4/place", None),  # pending: its place would say it is there
    ("GET", "/jobs/job-2/logs", None),
    ("GET", "/jobs/job-2/logs?follow=1", None),
    ("DELETE", "/jobs/job-2", None),
    ("POST", "/jobs/job-2/retry", None),
    ("POST", "/jobs/retry", {"job_ids": ["job-2"]}),
    ("POST", "/jobs", {"command": "x", "after": ["job-2"]}),
    ("POST", "/jobs/batch", {"jobs": [{"command": "x", "after": ["job-2"]}]}),
]


@BOTH_FRONTS
@pytest.mark.parametrize(("method", "path", "body"), JOB_CALLS)
def test_another_namespaces_job_is_answered_as_one_that_does_not_exist(
    teams: Teams, method: str, path: str, body: Any
) -> None:
    """The attack: key `a` (team-a) reads, follows, cancels, retries or depends on job-2
    (team-b, failed; job-4 for a cancel, pending): the answer is the unknown id's, to the
    byte, and nothing changes."""
    api, a = teams
    if method == "DELETE":
        path = path.replace("job-2", "job-4")
    kw = {} if body is None else {"json": body}
    before = world(api)
    started = time.monotonic()
    attacked = api.request(method, path, headers=a, **kw)
    waited = time.monotonic() - started
    unknown = as_unknown(api, method, path.replace("job-4", "job-2"), a, **kw)
    assert answer(attacked) == said_of(unknown, "job-2")
    assert attacked.status_code in (200, 400, 404)
    assert "hunter2" not in attacked.text and "out of job-2" not in attacked.text
    if "wait=60" in path:
        assert waited < 30  # answered at once, as an unknown job: never waited on
    assert world(api) == before


def test_the_unknown_ids_answers_are_the_ones_the_attacks_compare_with(teams: Teams) -> None:
    """What the attacks above get, said once: a 404 `job not found`, a bulk retry's
    not_found, and `after`'s 400."""
    api, a = teams
    for path in ("/jobs/job-2", "/jobs/job-2/attempts", "/jobs/job-2/place", "/jobs/job-2/logs"):
        assert answer(api.get(path, headers=a))[::2] == (404, "job not found\n")
    retried = api.post("/jobs/retry", json={"job_ids": ["job-2"]}, headers=a)
    assert assert_json(retried)["not_found"] == ["job-2"]
    made = api.post("/jobs", json={"command": "x", "after": ["job-2"]}, headers=a)
    assert answer(made)[::2] == (400, "invalid after: job-2 is not a job\n")


@BOTH_FRONTS
def test_a_bulk_retry_retries_its_own_and_reports_the_others_as_not_found(teams: Teams) -> None:
    api, a = teams
    body = {"job_ids": ["job-1", "job-2", UNKNOWN]}
    done = assert_json(api.post("/jobs/retry", json=body, headers=a))
    assert done["retried"] == ["job-1"] and done["not_found"] == ["job-2", UNKNOWN]
    assert assert_json(api.get("/jobs/job-2", headers=ADMIN))["status"] == "failed"
    assert assert_json(api.get("/jobs/job-1", headers=ADMIN))["retried_by"] == "a"


@BOTH_FRONTS
def test_a_limited_key_does_all_of_it_on_its_own_namespaces_jobs(teams: Teams) -> None:
    api, a = teams
    job = assert_json(api.get("/jobs/job-1", headers=a))
    assert job["namespace"] == "team-a" and job["env_vars"] == SECRET
    assert (
        assert_json(api.get("/jobs/job-1?wait=1&status_not=running", headers=a))["job_id"]
        == "job-1"
    )
    assert [t["exit_code"] for t in assert_json(api.get("/jobs/job-1/attempts", headers=a))] == [2]
    assert api.get("/jobs/job-1/logs", headers=a).status_code == 200
    with api.stream("GET", "/jobs/job-1/logs?follow=1", headers=a) as followed:
        assert followed.status_code == 200
        assert "event: end" in "".join(followed.iter_text())
    assert assert_json(api.post("/jobs/job-1/retry", headers=a))["status"] == "pending"
    assert assert_json(api.delete("/jobs/job-3", headers=a))["cancelled_by"] == "a"
    made = assert_json(api.post("/jobs", json={"command": "x", "after": ["job-1"]}, headers=a), 201)
    assert made["namespace"] == "team-a" and made["status"] == "waiting"


@BOTH_FRONTS
@pytest.mark.parametrize("path", ["/jobs/{}", "/jobs/{}?wait=1&status_not=pending"])
def test_a_limited_reader_sees_its_namespaces_job_without_env_values_and_no_other(
    teams: Teams, path: str
) -> None:
    api, _ = teams
    reader = as_key(make_key(api, "r", "reader", ["team-a"]))
    assert assert_json(api.get(path.format("job-1"), headers=reader))["env_vars"] == {
        "DB_PASSWORD": "(hidden)"
    }
    hidden = api.get(path.format("job-2"), headers=reader)
    assert answer(hidden) == answer(api.get(path.format(UNKNOWN), headers=reader))


@BOTH_FRONTS
@pytest.mark.parametrize("command", ["x", "another"])
def test_another_namespaces_idempotency_key_replays_nothing_of_its(
    teams: Teams, command: str
) -> None:
    """The attack: key `a` sends the Idempotency-Key team-b's key used, with the same body
    (its replay would be team-b's job, 200) or another (422 would say the key was used). An
    Idempotency-Key is per namespace: it is a new key in team-a's, and makes team-a's job."""
    api, a = teams
    b = as_key(make_key(api, "b", "submitter", ["team-b"]))
    theirs = {"Idempotency-Key": "nightly-1", **b}
    made = assert_json(api.post("/jobs", json={"command": "x"}, headers=theirs), 201)
    assert made["namespace"] == "team-b"
    mine = api.post(
        "/jobs", json={"command": command}, headers={**a, "Idempotency-Key": "nightly-1"}
    )
    job = assert_json(mine, 201)
    assert (job["namespace"], job["submitted_by"]) == ("team-a", "a")
    assert job["job_id"] != made["job_id"]
    again = api.post("/jobs", json={"command": "x"}, headers=theirs)  # team-b's own replay
    assert assert_json(again, 200)["job_id"] == made["job_id"]


@pytest.mark.parametrize("command", ["x", "another"])
def test_another_namespaces_batch_key_replays_nothing_of_its(teams: Teams, command: str) -> None:
    api, a = teams
    b = as_key(make_key(api, "b", "submitter", ["team-b"]))
    body = {"jobs": [{"command": "x"}]}
    theirs = assert_json(api.post("/jobs/batch", json=body, headers={**b, "Idempotency-Key": "k"}))
    mine = api.post(
        "/jobs/batch",
        json={"jobs": [{"command": command}]},
        headers={**a, "Idempotency-Key": "k"},
    )
    [made] = assert_json(mine)["jobs"]
    assert made["job_id"] != theirs["jobs"][0]["job_id"]
    assert assert_json(api.get(f"/jobs/{made['job_id']}", headers=a))["namespace"] == "team-a"


def test_a_key_of_the_default_namespace_and_one_named_like_anothers_prefix(teams: Teams) -> None:
    """The scripts match a namespace whole (models/namespace.py scope): a key limited to
    default and `team` reaches the default's jobs, and not team-a's or team-b's."""
    api, _ = teams
    key = as_key(make_key(api, "d", "submitter", ["default", "team"]))
    mine = submit(api, ADMIN)["job_id"]
    assert assert_json(api.delete(f"/jobs/{mine}", headers=key))["cancelled_by"] == "d"
    before = world(api)
    for job_id in ("job-3", "job-4"):
        assert answer(api.delete(f"/jobs/{job_id}", headers=key))[::2] == (404, "job not found\n")
        assert answer(api.get(f"/jobs/{job_id}/logs", headers=key))[::2] == (
            404,
            "job not found\n",
        )
    assert world(api) == before


@BOTH_FRONTS
def test_the_admin_key_reaches_every_namespaces_jobs(teams: Teams) -> None:
    api, _ = teams
    for job_id in ("job-1", "job-2"):
        assert assert_json(api.get(f"/jobs/{job_id}", headers=ADMIN))["env_vars"] == SECRET
        assert len(assert_json(api.get(f"/jobs/{job_id}/attempts", headers=ADMIN))) == 1
        assert api.get(f"/jobs/{job_id}/logs", headers=ADMIN).status_code == 200
        assert assert_json(api.post(f"/jobs/{job_id}/retry", headers=ADMIN))["status"] == "pending"
    for job_id in ("job-3", "job-4"):
        assert assert_json(api.delete(f"/jobs/{job_id}", headers=ADMIN))["status"] == "failed"


@BOTH_FRONTS
def test_no_job_runs_after_another_namespaces_whoever_submits_it(teams: Teams) -> None:
    """`after` is universal: the admin key's job of team-a (or of the default namespace) may
    not run after team-b's job either, answered as for a job that does not exist."""
    api, _ = teams
    before = world(api)
    for namespace in ("team-a", "default"):
        body = {"command": "x", "after": ["job-2"], "namespace": namespace}
        refused = api.post("/jobs", json=body, headers=ADMIN)
        unknown = api.post("/jobs", json=_renamed(body), headers=ADMIN)
        assert answer(refused) == said_of(unknown, "job-2")
        assert refused.status_code == 400
    assert world(api) == before
    made = assert_json(
        api.post(
            "/jobs", json={"command": "x", "after": ["job-4"], "namespace": "team-b"}, headers=ADMIN
        ),
        201,
    )
    assert made["status"] == "waiting"


def test_a_default_job_may_run_after_one_made_before_namespaces_were_indexed(
    make_client: ClientFactory, rclient: redis.Redis, prefix: str
) -> None:
    """A job made before this version is in no namespace's index: the default's (its record
    names none), so a default job may still run after it; a team's may not."""
    api = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=ADMIN), 201)
    submit(api, ADMIN)
    assert rclient.zrem(Keys(prefix).namespace_jobs(""), "job-1") == 1
    made = submit(api, ADMIN, after=["job-1"])
    assert made["status"] == "waiting"
    refused = api.post(
        "/jobs", json={"command": "x", "after": ["job-1"], "namespace": "t"}, headers=ADMIN
    )
    assert answer(refused)[::2] == (400, "invalid after: job-1 is not a job\n")


# Schedules: a schedule's namespace is its template's.


@pytest.fixture
def scheduled(teams: Teams) -> Teams:
    """`teams` with schedules s-a (team-a), s-b (team-b) and s-d (the default namespace)."""
    api, a = teams
    for name, namespace in (("s-a", "team-a"), ("s-b", "team-b"), ("s-d", "default")):
        body = {"name": name, "every_secs": 3600, "job": {"command": "x", "namespace": namespace}}
        assert_json(api.post("/schedules", json=body, headers=ADMIN), 201)
    return api, a


SCHEDULE_CALLS = [
    ("GET", "/schedules/s-b"),
    ("DELETE", "/schedules/s-b"),
    ("POST", "/schedules/s-b/pause"),
    ("POST", "/schedules/s-b/resume"),
    ("GET", "/schedules/s-d"),
    ("DELETE", "/schedules/s-d"),
    ("POST", "/schedules/s-d/pause"),
]


@pytest.mark.parametrize(("method", "path"), SCHEDULE_CALLS)
def test_another_namespaces_schedule_is_answered_as_one_that_does_not_exist(
    scheduled: Teams, method: str, path: str
) -> None:
    api, a = scheduled
    if path.endswith("/resume"):
        assert_json(api.post("/schedules/s-b/pause", headers=ADMIN))
    before = world(api)
    attacked = api.request(method, path, headers=a)
    unknown = api.request(method, path.replace("s-b", "nope").replace("s-d", "nope"), headers=a)
    assert answer(attacked) == answer(unknown)
    assert answer(attacked)[::2] == (404, "schedule not found\n")
    assert world(api) == before


def test_a_limited_key_lists_only_its_namespaces_schedules_a_page_at_a_time(
    scheduled: Teams,
) -> None:
    api, a = scheduled
    for name in ("s-a2", "s-c"):
        body = {"name": name, "every_secs": 60, "job": {"command": "x"}}
        assert_json(api.post("/schedules", json=body, headers=a), 201)
    names = [s["name"] for s in assert_json(api.get("/schedules", headers=a))]
    assert names == ["s-a", "s-a2", "s-c"]
    # A page full of other namespaces' schedules is read past, not answered short.
    paged, after = [], ""
    while True:
        params = {"limit": "1", **({"after": after} if after else {})}
        page = assert_json(api.get("/schedules", params=params, headers=a))
        paged += [s["name"] for s in page]
        if len(page) < 1:
            break
        after = page[-1]["name"]
    assert paged == names
    everyone = [s["name"] for s in assert_json(api.get("/schedules", headers=ADMIN))]
    assert everyone == ["s-a", "s-a2", "s-b", "s-c", "s-d"]


def test_a_limited_keys_schedule_goes_to_its_first_namespace_and_no_other(
    scheduled: Teams,
) -> None:
    api, a = scheduled
    body = {"name": "mine", "every_secs": 60, "job": {"command": "x"}}
    made = assert_json(api.post("/schedules", json=body, headers=a), 201)
    assert made["job"]["namespace"] == "team-a"
    body = {"name": "theirs", "every_secs": 60, "job": {"command": "x", "namespace": "team-b"}}
    refused = api.post("/schedules", json=body, headers=a)
    assert answer(refused)[::2] == (
        403,
        "forbidden: the key 'a' may use the namespaces team-a; not 'team-b'\n",
    )
    assert api.get("/schedules/theirs", headers=ADMIN).status_code == 404


def test_a_limited_key_manages_its_own_schedules_and_the_admin_every_one(
    scheduled: Teams,
) -> None:
    api, a = scheduled
    for key, name in ((a, "s-a"), (ADMIN, "s-b"), (ADMIN, "s-d")):
        assert assert_json(api.get(f"/schedules/{name}", headers=key))["name"] == name
        assert assert_json(api.post(f"/schedules/{name}/pause", headers=key))["paused"] is True
        assert assert_json(api.post(f"/schedules/{name}/resume", headers=key))["paused"] is False
        assert api.delete(f"/schedules/{name}", headers=key).status_code == 204
    assert assert_json(api.get("/schedules", headers=ADMIN)) == []


def test_a_schedules_jobs_carry_its_namespace(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    """Each tick's job is made in the template's namespace (workers/firing.py), so the key
    that made the schedule sees it, and another team's does not."""
    ctx = make_ctx(api_key=ADMIN_KEY, node_ttl_secs=86400)
    api = make_client(ctx.settings)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=ADMIN), 201)
    a = as_key(make_key(api, "a", "operator", ["team-a"]))
    b = as_key(make_key(api, "b", "operator", ["team-b"]))
    body = {"name": "s", "every_secs": 10, "job": {"command": "x"}}
    assert_json(api.post("/schedules", json=body, headers=a), 201)
    tick = schedule_decoder.decode(cast(bytes, ctx.redis.hget(ctx.keys.schedules, "s"))).next_tick
    fired = asyncio.run(firing.fire_due(ctx, tick + 0.5, BuiltinRegistry()))
    assert fired == Counter(schedule_fired=1)
    job = assert_json(api.get("/jobs/job-1", headers=a))
    assert (job["namespace"], job["schedule"]) == ("team-a", "s")
    assert answer(api.get("/jobs/job-1", headers=b))[::2] == (404, "job not found\n")


# The scripts' side of it, in memory.


def test_a_keys_namespaces_reach_the_scripts_as_one_string() -> None:
    assert script_scope(()) == "" == Principal("admin", Role.ADMIN).scope
    assert script_scope(("team-a",)) == ",team-a,"
    assert script_scope(("team-a", "default")) == ",team-a,,"
