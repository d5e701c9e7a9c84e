"""The web UI's pages as HTML (tests/api/test_ui_browser.py drives them in a real browser):
who may see them, that what they show is escaped, and that bad filters are 400s."""

from __future__ import annotations

from starlette.testclient import TestClient

from scheduler.api.http import UI_COOKIE
from tests.conftest import ClientFactory, assert_text_error, register, submit

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
    assert_text_error(
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
