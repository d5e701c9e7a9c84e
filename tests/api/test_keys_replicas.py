"""Named keys across API replicas sharing one Redis (api/keyring.py): a key made through one
replica works at once through another, on both of its fronts, before that replica's periodic
look; and an unknown key of the named form is still a counted wrong credential."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.processes import api_replicas, scheduler_env, unique_prefix

KEY = secrets.token_urlsafe(32)
ADMIN = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def replicas(redis_url: str) -> Iterator[list[str]]:
    # A look every hour: only the read on a miss can let a new key in.
    env = scheduler_env(
        redis_url,
        unique_prefix("keys-replicas"),
        TINYAWS_API_KEY=KEY,
        KEYRING_REFRESH_SECS="3600",
    )
    with api_replicas(2, env) as urls:
        yield urls


def test_a_key_made_through_one_replica_works_at_once_through_the_other(
    replicas: list[str],
) -> None:
    one, two = replicas
    node = {"id": "n1", "hostname": "n1", "cpu_count": 1, "role": "compute"}
    assert httpx.post(f"{one}/nodes/register", json=node, headers=ADMIN).status_code == 201
    made = httpx.post(f"{one}/keys", json={"name": "fresh", "role": "submitter"}, headers=ADMIN)
    assert made.status_code == 201
    fresh = {"Authorization": f"Bearer {made.json()['key']}"}
    submitted = httpx.post(f"{two}/jobs", json={"command": "x"}, headers=fresh)  # the lane
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()["job_id"]
    assert httpx.get(f"{two}/jobs/{job}", headers=fresh).status_code == 200
    assert httpx.get(f"{two}/jobs", params={"limit": 1}, headers=fresh).status_code == 200


def test_an_unknown_key_of_the_named_form_is_still_a_counted_wrong_credential(
    redis_url: str,
) -> None:
    # An API of its own: the bar it sets on this address would refuse the other tests' keys.
    env = scheduler_env(
        redis_url, unique_prefix("keys-guess"), TINYAWS_API_KEY=KEY, AUTH_FAILURES_MAX="3"
    )
    guess = {"Authorization": "Bearer tka_" + secrets.token_urlsafe(32)}
    with api_replicas(1, env) as (url,):
        codes = [httpx.get(f"{url}/jobs/job-1", headers=guess).status_code for _ in range(5)]
    assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429]


def test_a_key_made_a_moment_ago_on_another_replica_is_never_counted_wrong_on_a_node_route(
    replicas: list[str], rclient: redis.Redis
) -> None:
    """The node routes look a named key up in their handler (agents.py), where the door's
    second look does not reach: the refusal reads the keys again before it counts, so the
    right key is refused once at most, never counted, and works from then on."""
    one, two = replicas
    node = {"id": "n2", "hostname": "n2", "cpu_count": 1, "role": "compute"}
    assert httpx.post(f"{one}/nodes/register", json=node, headers=ADMIN).status_code == 201
    made = httpx.post(f"{one}/keys", json={"name": "ops", "role": "operator"}, headers=ADMIN)
    ops = {"Authorization": f"Bearer {made.json()['key']}"}
    first = httpx.post(f"{two}/nodes/n2/drain", headers=ops)
    assert first.status_code in (200, 401), first.text
    assert httpx.post(f"{two}/nodes/n2/drain", headers=ops).status_code == 200
    assert not [k for k in rclient.scan_iter(match="*authfail*") if b"keys-replicas" in k]


def test_a_key_made_a_moment_ago_on_another_replica_logs_in_to_the_ui(
    replicas: list[str],
) -> None:
    """The login form looks the key up as the door does: one this replica does not know yet
    has the keys read again first, rather than a 401 counted as a wrong key."""
    one, two = replicas
    made = httpx.post(f"{one}/keys", json={"name": "viewer", "role": "reader"}, headers=ADMIN)
    assert made.status_code == 201
    login = httpx.post(f"{two}/ui/login", data={"key": made.json()["key"]})
    assert login.status_code == 303, login.text
    assert login.headers["location"] == "/ui"
