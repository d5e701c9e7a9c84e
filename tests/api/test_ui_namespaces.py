"""Issue 41, namespaces in the web UI: a session logged in with a key limited to team-a meets
team-b's job and schedule as ones that do not exist (404, the unknown id's page), and its
buttons' forms posted at them, with a valid token, change nothing. Over HTTP against
`scheduler serve`'s protocol, as tests/api/test_ui_roles.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.test_ui_roles import ADMIN, KEY, client, login, token_of
from tests.conftest import Serve

UNKNOWN = "job-999"

Teams = tuple[httpx.Client, dict[str, str]]


@pytest.fixture
def teams(serve: Serve) -> Iterator[Teams]:
    """n1; job-1 (team-a) and job-2 (team-b) failed, job-3 (team-a) and job-4 (team-b)
    pending; schedules s-a (team-a) and s-b (team-b); the session of an operator key limited
    to team-a: (client, its Cookie header)."""
    api = client(serve(api_key=KEY))
    assert api.post("/nodes/register", json={"id": "n1", "cpu_count": 8}).status_code == 201
    for team in ("team-a", "team-b"):
        job = {"command": "x", "max_retries": 0, "namespace": team}
        assert api.post("/jobs", json=job, headers=ADMIN).status_code == 201
    for job_id in ("job-1", "job-2"):
        assert api.patch(f"/jobs/{job_id}", json={"status": "running"}).is_success
        assert api.patch(f"/jobs/{job_id}", json={"status": "failed", "exit_code": 2}).is_success
    for team in ("team-a", "team-b"):
        job = {"command": "y", "namespace": team}
        assert api.post("/jobs", json=job, headers=ADMIN).status_code == 201
        schedule = {"name": f"s-{team[-1]}", "every_secs": 3600, "job": job}
        assert api.post("/schedules", json=schedule, headers=ADMIN).status_code == 201
    body = {"name": "a", "role": "operator", "namespaces": ["team-a"]}
    made = api.post("/keys", json=body, headers=ADMIN)
    assert made.status_code == 201, made.text
    yield api, login(api, made.json()["key"])
    api.close()


def state(api: httpx.Client) -> Any:
    jobs = api.get("/jobs", headers=ADMIN).json()
    return jobs, api.get("/schedules", headers=ADMIN).json()


def page_of(response: httpx.Response, job_id: str) -> tuple[int, str]:
    """A page as it reads for `job_id` (the unknown id's, named back)."""
    return response.status_code, response.text.replace(UNKNOWN, job_id)


@pytest.mark.parametrize("path", ["/ui/jobs/job-2", "/ui/jobs/job-2/logs"])
def test_another_namespaces_job_page_is_the_unknown_ids(teams: Teams, path: str) -> None:
    api, cookie = teams
    seen = api.get(path, headers=cookie)
    unknown = api.get(path.replace("job-2", UNKNOWN), headers=cookie)
    assert seen.status_code == 404
    assert page_of(seen, "job-2") == page_of(unknown, "job-2")
    assert api.get("/ui/jobs/job-1", headers=cookie).status_code == 200  # its own


@pytest.mark.parametrize(
    ("target", "job_id"),
    [("/ui/jobs/job-4/cancel", "job-4"), ("/ui/jobs/job-2/retry", "job-2")],
)
def test_another_namespaces_jobs_buttons_change_nothing(
    teams: Teams, target: str, job_id: str
) -> None:
    """The attack: the page's form posted at team-b's job with the session's valid token."""
    api, cookie = teams
    before = state(api)
    pressed = api.post(target, data={"csrf": token_of(cookie)}, headers=cookie)
    unknown = api.post(
        target.replace(job_id, UNKNOWN), data={"csrf": token_of(cookie)}, headers=cookie
    )
    assert pressed.status_code == 404
    assert page_of(pressed, job_id) == page_of(unknown, job_id)
    assert state(api) == before


def test_the_failed_lists_retry_counts_another_namespaces_job_as_gone(teams: Teams) -> None:
    api, cookie = teams
    form = {"csrf": token_of(cookie), "job_id": ["job-1", "job-2"]}
    done = api.post("/ui/jobs/retry", data=form, headers=cookie)
    assert done.status_code == 303
    assert done.headers["location"] == "/ui/jobs?status=failed&retried=1&skipped=1"
    assert api.get("/jobs/job-2", headers=ADMIN).json()["status"] == "failed"
    assert api.get("/jobs/job-1", headers=ADMIN).json()["status"] == "pending"


def test_its_own_jobs_buttons_work(teams: Teams) -> None:
    api, cookie = teams
    page = api.get("/ui/jobs/job-3", headers=cookie)
    assert page.status_code == 200 and 'id="cancel"' in page.text
    done = api.post("/ui/jobs/job-3/cancel", data={"csrf": token_of(cookie)}, headers=cookie)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-3")
    assert api.get("/jobs/job-3", headers=ADMIN).json()["cancelled_by"] == "a"


def test_the_schedules_page_shows_its_namespaces_and_the_others_buttons_do_nothing(
    teams: Teams,
) -> None:
    api, cookie = teams
    page = api.get("/ui/schedules", headers=cookie)
    assert page.status_code == 200
    assert 'id="row-s-a"' in page.text and "s-b" not in page.text
    before = state(api)
    for target in ("/ui/schedules/s-b/pause", "/ui/schedules/nope/pause"):
        pressed = api.post(target, data={"csrf": token_of(cookie)}, headers=cookie)
        assert pressed.status_code == 404 and "schedule not found" in pressed.text
    assert state(api) == before
    done = api.post("/ui/schedules/s-a/pause", data={"csrf": token_of(cookie)}, headers=cookie)
    assert done.status_code == 303
    assert api.get("/schedules/s-a", headers=ADMIN).json()["paused"] is True


def test_a_limited_session_sees_the_fleet_but_not_every_jobs_counts(teams: Teams) -> None:
    """The nodes page shows the shared fleet; a node's job list (by node, not namespace) is no
    link, and the deployment's counts of every job and the workers' counters are not shown;
    the jobs page has no node filter. An admin's pages have all of it."""
    api, cookie = teams
    nodes = api.get("/ui/nodes", headers=cookie)
    assert nodes.status_code == 200 and 'id="node-n1"' in nodes.text
    assert "node_id=n1" not in nodes.text
    assert 'id="by-status"' not in nodes.text and 'id="counters"' not in nodes.text
    jobs = api.get("/ui/jobs", headers=cookie)
    assert jobs.status_code == 200 and 'name="node_id"' not in jobs.text
    admin = login(api, KEY)
    nodes = api.get("/ui/nodes", headers=admin).text
    assert "node_id=n1" in nodes and 'id="by-status"' in nodes and 'id="counters"' in nodes
    assert 'name="node_id"' in api.get("/ui/jobs", headers=admin).text
