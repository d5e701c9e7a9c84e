"""The web UI's pages as HTML (tests/api/test_ui_browser.py drives them in a real browser):
who may see them, that what they show is escaped, and that bad filters are 400s."""

from __future__ import annotations

from starlette.testclient import TestClient

from scheduler.api.http import UI_COOKIE
from tests.conftest import ClientFactory, assert_ui_error, register, submit

KEY = "ui-key"


def test_without_a_key_the_pages_are_open(client: TestClient) -> None:
    register(client, "n1")
    submit(client, command="echo hi")
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/jobs"
    for path in ("/ui/jobs", "/ui/jobs/job-1", "/ui/nodes"):
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
    assert logged_in.status_code == 303
    cookie = logged_in.headers["set-cookie"]
    assert (
        KEY not in cookie and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    )
    assert api.get("/ui/jobs").status_code == 200
    # The API's own routes still want the key, cookie or not.
    assert api.get("/jobs").status_code == 401


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
    # A form posted from elsewhere carries no token (and, cross-site, no cookie either).
    assert api.post("/ui/jobs/job-1/cancel", data={"csrf": "x"}).status_code == 403
    assert api.get("/jobs/job-1", headers=key).json()["status"] == "pending"
    token = page.split('name="csrf" value="')[1].split('"')[0]
    assert KEY not in token
    done = api.post("/ui/jobs/job-1/cancel", data={"csrf": token}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-1")
    assert api.get("/jobs/job-1", headers=key).json()["failure_reason"] == "cancelled"


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
    from scheduler.api.ui import _cell
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
