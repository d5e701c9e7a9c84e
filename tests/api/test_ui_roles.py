"""The web UI with named keys (issue 41: "the UI logs in with any key and shows only what its
role allows"), over HTTP against `scheduler serve`'s protocol on a real Redis: a reader's,
a submitter's and an operator's logins, the buttons each one's pages show, a reader's
forged button press (a valid token, the door's 403, nothing changed), a revoked key's
session sent to the login form, and wrong keys at the login still counted."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import httpx
import pytest
import redis

from scheduler.api.http import UI_COOKIE
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, Serve

KEY = "ui-admin-key"
ADMIN = {"Authorization": f"Bearer {KEY}"}
ROLES = ("reader", "submitter", "operator")

# Every button of the UI: its id, the page that shows it, the route it posts to.
BUTTONS = {
    "cancel": ("/ui/jobs/job-2", "/ui/jobs/job-2/cancel"),
    "retry": ("/ui/jobs/job-1", "/ui/jobs/job-1/retry"),
    "retry-failed": ("/ui/jobs?status=failed", "/ui/jobs/retry"),
    "drain-n1": ("/ui/nodes", "/ui/nodes/n1/drain"),
    "pause-ticker": ("/ui/schedules", "/ui/schedules/ticker/pause"),
}
# The buttons each role's pages show: the routes' own roles (routes_ui.py).
SHOWN = {
    "reader": set(),
    "submitter": {"cancel", "retry", "retry-failed"},
    "operator": set(BUTTONS),
    "admin": set(BUTTONS),
}


def client(url: str, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections leave from `address` (any 127.x address is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, transport=transport, follow_redirects=False)


def make_key(api: httpx.Client, name: str, role: str) -> str:
    answer = api.post("/keys", json={"name": name, "role": role}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["key"]
    return key


def login(api: httpx.Client, key: str) -> dict[str, str]:
    """The session's Cookie header for a login with `key`."""
    answer = api.post("/ui/login", data={"key": key})
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui"), answer.text
    session: str = answer.cookies[UI_COOKIE]
    api.cookies.clear()
    return {"Cookie": f"{UI_COOKIE}={session}"}


def token_of(cookie: dict[str, str]) -> str:
    """The session's CSRF token, as its pages would carry it (ui_session.csrf): a forged
    press holds a valid one, so only the role stops it."""
    session = cookie["Cookie"].split("=", 1)[1]
    message = f"tinyaws-ui-csrf:{session}".encode()
    return hmac.new(KEY.encode(), message, hashlib.sha256).hexdigest()


def setup(api: httpx.Client) -> dict[str, str]:
    """n1; job-1 failed (retry, bulk retry), job-2 pending (cancel), schedule ticker active
    (pause); a key of each role, by its role's name."""
    assert api.post("/nodes/register", json={"id": "n1"}).status_code == 201
    assert api.post("/jobs", json={"command": "x", "max_retries": 0}, headers=ADMIN).is_success
    api.patch("/jobs/job-1", json={"status": "running"})
    api.patch("/jobs/job-1", json={"status": "failed", "exit_code": 2})
    assert api.post("/jobs", json={"command": "y"}, headers=ADMIN).status_code == 201
    ticker = {"name": "ticker", "every_secs": 3600, "job": {"command": "z"}}
    assert api.post("/schedules", json=ticker, headers=ADMIN).status_code == 201
    return {role: make_key(api, role, role) for role in ROLES}


def state(api: httpx.Client) -> Any:
    jobs = api.get("/jobs", headers=ADMIN).json()
    nodes = api.get("/nodes", headers=ADMIN).json()
    schedules = api.get("/schedules", headers=ADMIN).json()
    return jobs, nodes, schedules


def shown(api: httpx.Client, cookie: dict[str, str]) -> set[str]:
    """The buttons the session's pages show, by id."""
    found = set()
    for button, (page, _) in BUTTONS.items():
        html = api.get(page, headers=cookie)
        assert html.status_code == 200, (page, html.text)
        if f'id="{button}"' in html.text:
            found.add(button)
    return found


@pytest.fixture
def keyed(serve: Serve) -> tuple[httpx.Client, dict[str, str]]:
    api = client(serve(api_key=KEY))
    return api, setup(api)


@pytest.mark.parametrize("role", [*ROLES, "admin"])
def test_any_key_logs_in_and_its_pages_show_what_its_role_may_press(
    keyed: tuple[httpx.Client, dict[str, str]], role: str
) -> None:
    api, keys = keyed
    cookie = login(api, keys.get(role, KEY))
    home = api.get("/ui", headers=cookie)
    assert home.status_code == 200
    # Each key here is named as its role: said once, not "admin · admin".
    said = f'id="who" title="{role}"><span class="name">{role}</span></span>'
    assert said in home.text and f"{role} · {role}" not in home.text
    assert shown(api, cookie) == SHOWN[role]


@pytest.mark.parametrize("role", ["reader", "submitter"])
def test_a_press_its_role_may_not_make_is_403_and_changes_nothing(
    keyed: tuple[httpx.Client, dict[str, str]], role: str
) -> None:
    """The attack: a logged-in key posts a button its page does not show, with a valid
    token. The door refuses it by the route's role, before the form is read."""
    api, keys = keyed
    cookie = login(api, keys[role])
    before = state(api)
    for button, (_, target) in BUTTONS.items():
        if button in SHOWN[role]:
            continue
        refused = api.post(target, data={"csrf": token_of(cookie)}, headers=cookie)
        assert refused.status_code == 403, (target, refused.text)
        assert refused.headers["content-type"].startswith("text/html")  # a UI page
        assert f"has the role {role}; this call needs " in refused.text
        assert f'id="who" title="{role}"' in refused.text
    assert state(api) == before
    assert api.get("/jobs/job-2", headers=ADMIN).json()["status"] == "pending"


def test_a_submitter_cancels(keyed: tuple[httpx.Client, dict[str, str]]) -> None:
    api, keys = keyed
    cookie = login(api, keys["submitter"])
    done = api.post("/ui/jobs/job-2/cancel", data={"csrf": token_of(cookie)}, headers=cookie)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/jobs/job-2")
    assert api.get("/jobs/job-2", headers=ADMIN).json()["failure_reason"] == "cancelled"


def test_a_revoked_keys_session_is_sent_to_the_login_form(
    keyed: tuple[httpx.Client, dict[str, str]], rclient: redis.Redis, prefix: str
) -> None:
    api, keys = keyed
    reader, operator = login(api, keys["reader"]), login(api, keys["operator"])
    assert api.get("/ui/jobs", headers=reader).status_code == 200
    assert len(rclient.keys(Keys(prefix).ui_session("*"))) == 2
    assert api.delete("/keys/reader", headers=ADMIN).status_code == 204
    for page in ("/ui/jobs", "/ui"):
        gone = api.get(page, headers=reader)
        assert (gone.status_code, gone.headers["location"]) == (303, "/ui/login")
    assert len(rclient.keys(Keys(prefix).ui_session("*"))) == 1  # ended, not only refused
    assert api.post("/ui/login", data={"key": keys["reader"]}).status_code == 401
    # A key of the same name made again with another role is another key: the old
    # session does not carry the new role.
    make_key(api, "reader", "operator")
    assert api.get("/ui/jobs", headers=reader).headers["location"] == "/ui/login"
    assert api.get("/ui/jobs", headers=operator).status_code == 200  # the others' stay


def test_a_leaked_keys_session_ends_when_the_key_is_rotated_under_the_same_name_and_role(
    keyed: tuple[httpx.Client, dict[str, str]],
) -> None:
    """The attack: a leaked key logged in; the admin rotates it (revoke, then make the same
    name and role again) before the session's next page. The new key is another key: the
    old session is not its, nor is the stream it followed."""
    api, keys = keyed
    leaked = login(api, keys["reader"])
    assert api.get("/ui/jobs", headers=leaked).status_code == 200
    assert api.delete("/keys/reader", headers=ADMIN).status_code == 204
    login(api, make_key(api, "reader", "reader"))  # the rotated key works
    gone = api.get("/ui/jobs", headers=leaked)
    assert (gone.status_code, gone.headers.get("location")) == (303, "/ui/login")


def test_a_session_from_before_named_keys_is_the_admin_keys(
    keyed: tuple[httpx.Client, dict[str, str]], rclient: redis.Redis, prefix: str
) -> None:
    """Only TINYAWS_API_KEY logged in before: its sessions held "1", and stay logged in."""
    api, _ = keyed
    session = secrets.token_urlsafe(32)
    stored = Keys(prefix).ui_session(hashlib.sha256(session.encode()).hexdigest())
    rclient.set(stored, "1", px=60_000)
    cookie = {"Cookie": f"{UI_COOKIE}={session}"}
    assert shown(api, cookie) == SHOWN["admin"]
    assert 'id="who" title="admin"' in api.get("/ui", headers=cookie).text


def test_a_wrong_key_at_login_still_counts(
    keyed: tuple[httpx.Client, dict[str, str]], rclient: redis.Redis, prefix: str
) -> None:
    api, keys = keyed
    attacker = client(str(api.base_url), "127.0.0.3")
    # Wrong keys, some shaped as named ones: 401 with the form again, each counted.
    for _ in range(10):
        guess = f"tka_{secrets.token_urlsafe(32)}"
        wrong = attacker.post("/ui/login", data={"key": guess})
        assert wrong.status_code == 401 and "wrong key" in wrong.text
    refused = attacker.post("/ui/login", data={"key": keys["reader"] + "x"})
    assert refused.status_code == 429
    assert not rclient.keys(Keys(prefix).ui_session("*"))
    # A right named key is served from the address all the same (issue 36).
    assert (
        'id="who" title="reader"'
        in attacker.get("/ui", headers=login(attacker, keys["reader"])).text
    )


def test_without_a_key_everyone_sees_every_button_and_no_name(serve: Serve) -> None:
    api = client(serve(api_key=""))
    assert api.post("/nodes/register", json={"id": "n1"}).status_code == 201
    assert api.post("/jobs", json={"command": "x", "max_retries": 0}).is_success
    api.patch("/jobs/job-1", json={"status": "running"})
    api.patch("/jobs/job-1", json={"status": "failed", "exit_code": 2})
    assert api.post("/jobs", json={"command": "y"}).status_code == 201
    ticker = {"name": "ticker", "every_secs": 3600, "job": {"command": "z"}}
    assert api.post("/schedules", json=ticker).status_code == 201
    assert shown(api, {}) == set(BUTTONS)
    home = api.get("/ui").text
    assert 'id="who"' not in home and "Log out" not in home


def test_a_process_that_has_not_read_the_keys_reads_them_before_it_decides(
    make_client: ClientFactory, rclient: redis.Redis, prefix: str
) -> None:
    """A replica just started holds no keys yet: that is no revocation. A named key's session
    has the keys read again, and is let in."""
    api = make_client(api_key=KEY, keyring_refresh_secs=3600)
    made = api.post("/keys", json={"name": "reader", "role": "reader"}, headers=ADMIN)
    answer = api.post("/ui/login", data={"key": made.json()["key"]}, follow_redirects=False)
    cookie = {"Cookie": f"{UI_COOKIE}={answer.cookies[UI_COOKIE]}"}
    api.cookies.clear()
    api.app.state.credentials.keyring.take(-1, [])  # as a process before its first read
    early = api.get("/ui/jobs", headers=cookie, follow_redirects=False)
    assert early.status_code == 200 and 'id="who" title="reader"' in early.text
    assert len(rclient.keys(Keys(prefix).ui_session("*"))) == 1
