"""The web UI's door tried as an attacker would (docs/SECURITY.md, issue 22 item 9), over
HTTP against `scheduler serve`'s protocol on a real Redis: forged and old cookies, sessions
after logout and after their TTL, cross-site form posts with and without a key, login and
bearer guessing (per client address: 127.0.0.1 is the attacker, 127.0.0.2 the operator),
and the headers that keep pages out of frames and answers out of caches. Each refused
attack leaves the jobs and schedules as they were."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

import httpx
import pytest
import redis

from scheduler.api.http import UI_COOKIE
from scheduler.store.keys import Keys
from tests.conftest import Serve

KEY = "ui-operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
EVIL = "http://evil.example"


def client(url: str, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections leave from `address` (any 127.x address is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, transport=transport, follow_redirects=False)


def login(api: httpx.Client) -> str:
    answer = api.post("/ui/login", data={"key": KEY})
    assert answer.status_code == 303, answer.text
    session: str = answer.cookies[UI_COOKIE]
    api.cookies.clear()
    return session


def with_session(session: str) -> dict[str, str]:
    return {"Cookie": f"{UI_COOKIE}={session}"}


def setup_jobs(api: httpx.Client, headers: dict[str, str]) -> None:
    """n1; job-1 failed (the retry forms), job-2 pending (the cancel form), schedule ticker
    active (the pause form)."""
    assert api.post("/nodes/register", json={"id": "n1"}).status_code == 201
    assert api.post("/jobs", json={"command": "x", "max_retries": 0}, headers=headers).is_success
    api.patch("/jobs/job-1", json={"status": "running"})
    api.patch("/jobs/job-1", json={"status": "failed", "exit_code": 2})
    assert api.post("/jobs", json={"command": "y"}, headers=headers).status_code == 201
    ticker = {"name": "ticker", "every_secs": 3600, "job": {"command": "z"}}
    assert api.post("/schedules", json=ticker, headers=headers).status_code == 201


def state(api: httpx.Client, headers: dict[str, str]) -> Any:
    jobs = api.get("/jobs", headers=headers).json()
    schedules = api.get("/schedules", headers=headers).json()
    return jobs, schedules


def page_token(api: httpx.Client, path: str, headers: dict[str, str]) -> str:
    page = api.get(path, headers=headers).text
    return page.split('name="csrf" value="')[1].split('"')[0]


# Every UI form that changes something: (path it posts to, the page carrying its token).
FORMS = [
    ("/ui/jobs/job-2/cancel", "/ui/jobs/job-2"),
    ("/ui/jobs/job-1/retry", "/ui/jobs/job-1"),
    ("/ui/jobs/retry", "/ui/jobs?status=failed"),
    ("/ui/schedules/ticker/pause", "/ui/schedules"),
]


def test_an_old_hmac_cookie_and_a_forged_one_open_nothing(serve: Serve) -> None:
    api = client(serve(api_key=KEY))
    setup_jobs(api, OPERATOR)
    before = state(api, OPERATOR)
    old = hmac.new(KEY.encode(), b"tinyaws-ui-session", hashlib.sha256).hexdigest()
    for cookie in (old, secrets.token_urlsafe(32), "", "x" * 5000):
        for method, path in (("GET", "/ui/jobs"), ("POST", "/ui/jobs/job-2/cancel")):
            answer = api.request(method, path, headers=with_session(cookie), data={"csrf": ""})
            assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")
    assert state(api, OPERATOR) == before


def test_a_session_stops_working_at_logout(serve: Serve, rclient: redis.Redis, prefix: str) -> None:
    api = client(serve(api_key=KEY))
    session = login(api)
    assert api.get("/ui/jobs", headers=with_session(session)).status_code == 200
    stored = Keys(prefix).ui_session(hashlib.sha256(session.encode()).hexdigest())
    assert rclient.exists(stored) and session.encode() not in b"".join(rclient.keys("*"))
    out = api.post("/ui/logout", headers=with_session(session))
    assert (out.status_code, out.headers["location"]) == (303, "/ui/login")
    assert not rclient.exists(stored)
    again = api.get("/ui/jobs", headers=with_session(session))
    assert (again.status_code, again.headers["location"]) == (303, "/ui/login")


def test_a_session_stops_working_after_its_ttl(serve: Serve) -> None:
    api = client(serve(api_key=KEY, ui_session_secs=1))
    session = login(api)
    deadline = time.monotonic() + 30
    while api.get("/ui/jobs", headers=with_session(session)).status_code == 200:
        assert time.monotonic() < deadline, "the session outlived its TTL"
        time.sleep(0.2)
    answer = api.get("/ui/jobs", headers=with_session(session))
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")


def test_the_cookie_is_secure_over_https_only(serve: Serve) -> None:
    api = client(serve(api_key=KEY))
    plain = api.post("/ui/login", data={"key": KEY}).headers["set-cookie"].lower()
    assert "httponly" in plain and "samesite=strict" in plain and "secure" not in plain
    # X-Forwarded-Proto counts only from a load balancer in TRUSTED_PROXIES.
    https = {"X-Forwarded-Proto": "https"}
    untrusted = api.post("/ui/login", data={"key": KEY}, headers=https)
    assert "secure" not in untrusted.headers["set-cookie"].lower()
    behind = client(serve(api_key=KEY, trusted_proxies="127.0.0.1/32"))
    tls = behind.post("/ui/login", data={"key": KEY}, headers=https)
    assert "; secure" in tls.headers["set-cookie"].lower()


@pytest.mark.parametrize("keyed", [True, False], ids=["key", "no-key"])
def test_a_cross_site_form_changes_nothing(serve: Serve, keyed: bool) -> None:
    api = client(serve(api_key=KEY if keyed else ""))
    operator = OPERATOR if keyed else {}
    setup_jobs(api, operator)
    ui = with_session(login(api)) if keyed else {}
    before = state(api, operator)
    for target, page in FORMS:
        token = page_token(api, page, ui)
        form = {"csrf": token, "job_id": "job-1"}
        # Another site's page: its Origin, even were it to hold the token (and the cookie:
        # a cross-site POST carries none with SameSite=Strict) ...
        evil = api.post(target, data=form, headers={**ui, "Origin": EVIL})
        assert evil.status_code == 403, (target, evil.text)
        assert api.post(target, data=form, headers={**ui, "Origin": "null"}).status_code == 403
        # ... or no token (the attacker cannot read ours), or an old-style one.
        for forged in ("", "x", hmac.new(KEY.encode(), b"tinyaws-ui-csrf", "sha256").hexdigest()):
            refused = api.post(target, data={**form, "csrf": forged}, headers=ui)
            assert refused.status_code == 403, (target, forged, refused.text)
    assert state(api, operator) == before
    # The page's own form, from its own origin, works.
    url = str(api.base_url).rstrip("/")
    token = page_token(api, "/ui/jobs/job-2", ui)
    own = api.post("/ui/jobs/job-2/cancel", data={"csrf": token}, headers={**ui, "Origin": url})
    assert own.status_code == 303


def test_the_eleventh_bad_login_is_429_and_the_right_key_still_logs_in(
    serve: Serve, rclient: redis.Redis, prefix: str
) -> None:
    url = serve(api_key=KEY)
    attacker, operator = client(url), client(url, "127.0.0.2")
    for _ in range(10):
        assert attacker.post("/ui/login", data={"key": secrets.token_hex(8)}).status_code == 401
    refused = attacker.post("/ui/login", data={"key": "guess-11"})
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 300
    assert not rclient.keys(Keys(prefix).ui_session("*"))
    # The right key is served whatever its address got wrong (issue 36: an operator behind
    # the attacker's NAT is not locked out) ...
    assert attacker.post("/ui/login", data={"key": KEY}).status_code == 303
    # ... and elsewhere too.
    assert operator.post("/ui/login", data={"key": KEY}).status_code == 303
    assert len(rclient.keys(Keys(prefix).ui_session("*"))) == 2


@pytest.mark.parametrize("path", ["/jobs/job-1", "/jobs"], ids=["lane", "asgi"])
def test_bad_bearer_keys_are_limited_per_address(serve: Serve, path: str) -> None:
    url = serve(api_key=KEY)
    attacker, operator = client(url), client(url, "127.0.0.2")
    setup_jobs(operator, OPERATOR)
    before = state(operator, OPERATOR)
    for guess in range(10):
        answer = attacker.get(path, headers={"Authorization": f"Bearer guess-{guess}"})
        assert answer.status_code == 401
    refused = attacker.get(path, headers={"Authorization": "Bearer guess-11"})
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 300
    # No credential at all guesses nothing: a plain 401.
    assert attacker.post("/jobs", json={"command": "evil"}, headers={}).status_code == 401
    # The right key is served from the address too (issue 36), and from another.
    assert attacker.get(path, headers=OPERATOR).status_code == 200
    assert operator.get(path, headers=OPERATOR).status_code == 200
    assert state(operator, OPERATOR) == before


FRAMES = {"x-frame-options": "DENY", "cache-control": "no-store"}


def test_every_ui_answer_denies_frames_and_caches(serve: Serve) -> None:
    api = client(serve(api_key=KEY))
    setup_jobs(api, OPERATOR)
    stranger = [
        api.get(p) for p in ("/ui", "/ui/jobs", "/ui/login", "/ui/nope", "/ui/jobs/job-1/logs")
    ]
    ui = with_session(login(api))
    pages = ["/ui/jobs", "/ui/jobs/job-1", "/ui/nodes", "/ui/schedules", "/ui/jobs/job-9"]
    pages += ["/ui/jobs/job-2", "/ui/jobs/job-1/logs"]  # live output: job-1's has ended
    seen = stranger + [api.get(p, headers=ui) for p in pages]
    seen.append(api.post("/ui/jobs/job-2/cancel", data={"csrf": "x"}, headers=ui))  # 403
    for answer in seen:
        assert {k: answer.headers.get(k) for k in FRAMES} == FRAMES, answer.url
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


def test_every_answer_carrying_env_vars_or_output_is_no_store(serve: Serve) -> None:
    api = client(serve(api_key=KEY))
    secret = {"command": "x", "env_vars": {"DB_PASSWORD": "hunter2"}}
    assert api.post("/nodes/register", json={"id": "n1"}).status_code == 201
    answers = [api.post("/jobs", json=secret, headers=OPERATOR)]  # the lane's submit
    chunked = iter([b'{"command": "y"}'])  # no Content-Length: ASGI's
    answers.append(api.post("/jobs", content=chunked, headers=OPERATOR))
    answers.append(api.get("/jobs?node_id=n1&status=pending"))  # the poll (lane)
    answers.append(api.get("/jobs?node_id=n1&status=pending&wait=0"))  # the poll (ASGI)
    answers.append(api.patch("/jobs/job-1", json={"status": "running"}))  # report (lane)
    report = {"status": "done", "exit_code": 0, "stdout": "out"}
    answers.append(api.patch("/jobs/job-1?via=asgi", json=report))  # a query: ASGI's
    for path in ("/jobs/job-1", "/jobs/job-1?wait=0", "/jobs", "/jobs/job-1/attempts"):
        answers.append(api.get(path, headers=OPERATOR))
    for answer in answers:
        assert answer.status_code in (200, 201), (answer.url, answer.text)
        assert answer.headers["cache-control"] == "no-store", answer.url


def test_wrong_keys_from_one_ipv6_slash_64_count_as_one_address() -> None:
    from scheduler.api.guesses import Credentials

    guesses = Credentials(limit=10, window_secs=300.0)
    spread = {guesses.address_of(f"2001:db8:1:2::{n:x}", []) for n in range(1, 200)}
    assert spread == {"2001:db8:1:2::/64"}
    assert guesses.address_of("2001:db8:1:3::1", []) == "2001:db8:1:3::/64"
    assert guesses.address_of("::ffff:10.0.0.7", []) == "10.0.0.7"  # IPv4, mapped
    assert guesses.address_of("10.0.0.7", []) == "10.0.0.7"
