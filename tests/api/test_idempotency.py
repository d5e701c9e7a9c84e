"""POST /jobs with an Idempotency-Key (issue 23, item 1): a replay of the same request answers
the job it made, 200, and creates nothing; the same key with another request is 422 and
creates nothing; across replicas (two apps on one Redis) and concurrent replays, one job.
Through both fronts: ASGI and the hot lane."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    SettingsFactory,
    assert_json,
    assert_text_error,
    register,
)

pytestmark = BOTH_FRONTS

BODY = {"command": "echo once", "env_vars": {"B": "2", "A": "1"}}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(idempotency_ttl_secs=3600)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "n1", "n2")
    return client


def post(api: TestClient, key: str | None, body: Any = BODY) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return api.post("/jobs", content=content, headers=headers)


def job_count(rclient: redis.Redis, settings: Settings) -> int:
    return int(rclient.zcard(Keys(settings.redis_prefix).all_jobs))


def test_a_replay_answers_the_job_it_made(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    first = assert_json(post(api, "order-17"), 201)
    again = assert_json(post(api, "order-17"), 200)
    assert again == first
    # The same request in other words (field order, spacing) is the same request.
    reordered = b'{ "env_vars": {"A":"1","B":"2"},  "command":"echo once" }'
    assert assert_json(post(api, "order-17", reordered), 200) == first
    assert job_count(rclient, settings) == 1
    # The replay answers the job as it is now, not as it was made.
    assert api.patch(f"/jobs/{first['job_id']}", json={"status": "running"}).status_code == 200
    assert assert_json(post(api, "order-17"), 200)["status"] == "running"


def test_the_key_with_another_request_is_refused_and_creates_nothing(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    assert_json(post(api, "k1"), 201)
    other = {**BODY, "command": "echo twice"}
    refused = post(api, "k1", other)
    assert_text_error(refused, 422, "Idempotency-Key already used with another request")
    assert job_count(rclient, settings) == 1


def test_without_a_key_every_post_is_a_new_job(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    """The original's behaviour, which its CLI and lambda service rely on."""
    ids = {assert_json(post(api, None), 201)["job_id"] for _ in range(3)}
    assert len(ids) == 3
    assert {assert_json(post(api, key), 201)["job_id"] for key in ("a", "b")}.isdisjoint(ids)
    assert job_count(rclient, settings) == 5


@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "has space", "tab\tkey", "ümlaut"],
    ids=["empty", "too long", "space", "control", "non-ascii"],
)
def test_a_bad_key_is_400_and_creates_nothing(
    key: str, api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    raw = key.encode("utf-8")
    response = api.post("/jobs", content=json.dumps(BODY), headers=[(b"idempotency-key", raw)])
    if key == "":
        # An empty header is no key: the original's plain submit.
        assert response.status_code == 201
        return
    assert_text_error(
        response, 400, "invalid Idempotency-Key: use 1 to 255 visible ASCII characters"
    )
    assert job_count(rclient, settings) == 0


def test_a_bad_body_with_a_key_is_400_and_the_key_stays_free(api: TestClient) -> None:
    assert post(api, "k2", b'{"command": 3}').status_code == 400
    assert post(api, "k2", {"command": ""}).status_code == 400
    assert_json(post(api, "k2"), 201)


def test_concurrent_replays_on_two_replicas_make_one_job(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis
) -> None:
    replicas = [make_client(settings), make_client(settings)]
    register(replicas[0], "n1")
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda i: post(replicas[i % 2], "shared"), range(16)))
    assert sorted(a.status_code for a in answers) == [200] * 15 + [201]
    assert len({a.json()["job_id"] for a in answers}) == 1
    assert job_count(rclient, settings) == 1


def test_the_key_is_remembered_for_the_window(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    assert_json(post(api, "k3"), 201)
    keys = Keys(settings.redis_prefix)
    stored = list(rclient.scan_iter(match=keys.submission("*")))
    assert len(stored) == 1
    assert 3500 < int(rclient.ttl(stored[0])) <= 3600  # IDEMPOTENCY_TTL_SECS


def test_a_replay_after_its_job_was_removed_is_a_conflict(
    api: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    job = assert_json(post(api, "k4"), 201)
    rclient.delete(Keys(settings.redis_prefix).job(job["job_id"]))  # as retention removes it
    assert_text_error(post(api, "k4"), 409, "the job of this Idempotency-Key has been removed")


def test_the_key_needs_the_api_key_first(make_client: ClientFactory) -> None:
    """Under a key, a stranger's replay learns nothing about the job a key made."""
    api = make_client(api_key="secret")
    auth = {"Authorization": "Bearer secret"}
    assert api.post("/nodes/register", json={"id": "n1"}, headers=auth).status_code == 201
    made = api.post("/jobs", json=BODY, headers={**auth, "Idempotency-Key": "k5"})
    assert made.status_code == 201
    stranger = api.post("/jobs", json=BODY, headers={"Idempotency-Key": "k5"})
    assert_text_error(stranger, 401, "unauthorized")
