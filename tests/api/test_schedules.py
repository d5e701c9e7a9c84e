"""The /schedules API (scheduler/api/schedules.py) against a real Redis: create, list, read,
pause, resume, delete; a bad request is a 400 naming the field and changes nothing; unknown
names 404, a taken name 409. Through ASGI: schedules are not hot routes."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.wire import parse_rfc3339
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, assert_text_error

NIGHTLY: dict[str, Any] = {
    "name": "nightly",
    "cron": "0 3 * * *",
    "timezone": "Europe/Paris",
    "catchup": "once",
    "job": {"command": "backup", "env_vars": {"TOKEN": "t0p"}},
}


def create(client: TestClient, **fields: Any) -> dict[str, Any]:
    response = client.post("/schedules", json={**NIGHTLY, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_create_read_and_list(client: TestClient) -> None:
    made = create(client)
    assert made["name"] == "nightly" and made["cron"] == "0 3 * * *"
    assert made["timezone"] == "Europe/Paris" and made["catchup"] == "once"
    assert made["paused"] is False
    # The template in full: the key that reads it reads every job it makes too.
    assert made["job"] == {"command": "backup", "env_vars": {"TOKEN": "t0p"}}
    assert made["next_run_at"].endswith("Z") and "last_job_id" not in made
    assert "uid" not in made and "next_tick" not in made
    assert client.get("/schedules/nightly").json() == made
    every = create(client, name="a-every", cron="", timezone="UTC", every_secs=90)
    assert every["every_secs"] == 90 and "cron" not in every
    assert parse_rfc3339(every["next_run_at"]) % 90 == 0
    listed = client.get("/schedules").json()
    assert [s["name"] for s in listed] == ["a-every", "nightly"]
    assert client.get("/schedules?limit=1").json() == [listed[0]]
    assert client.get("/schedules?after=a-every").json() == [listed[1]]


def test_a_taken_name_is_409_and_keeps_the_first(client: TestClient) -> None:
    create(client)
    again = client.post("/schedules", json={**NIGHTLY, "cron": "5 5 * * *"})
    assert_text_error(again, 409, "schedule already exists")
    assert client.get("/schedules/nightly").json()["cron"] == "0 3 * * *"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "invalid schedule: body: not valid JSON (it ends inside a value)\n"),
        (b"[]", "invalid schedule: body: must be a JSON object, got an array\n"),
        (b'{"cron": "* * * * *", "job": {"command": "x"}}', "invalid schedule: name: required\n"),
        (b'{"name": "x", "every_sec": 5}',
         "invalid schedule: every_sec: unknown field (did you mean every_secs?)\n"),
        (b'{"name": "x", "every_secs": "5"}',
         "invalid schedule: every_secs: must be an integer, got a string\n"),
        (b'{"name": "x", "paused": 1, "every_secs": 5}',
         "invalid schedule: paused: must be true or false, got an integer\n"),
        (b'{"name": "x", "every_secs": 5, "job": {"command": "x", "priorty": 5}}',
         "invalid job: priorty: unknown field (did you mean priority?)\n"),
        (b'{"name": "x", "every_secs": 5, "job": {"command": "x", "priority": 5000}}',
         "invalid job: priority: must be an integer between -1000 and 1000\n"),
        (b'{"name": "x y", "every_secs": 5, "job": {"command": "x"}}', "invalid name"),
        (b'{"name": "x", "cron": "bad", "job": {"command": "x"}}', "invalid cron"),
        (b'{"name": "x", "every_secs": 5, "job": {}}', "invalid job: command or deploy_url"),
        (b'{"name": "x", "every_secs": 5}', "invalid job"),
        (b'{"name": "x", "every_secs": 5, "job": {"command": "a\\u0000b"}}',
         "invalid job: invalid command: must not contain NUL bytes"),
        (b'{"name": "x", "every_secs": 5, "job": {"command": "x", "after": ["job-1"]}}',
         "invalid job: a template has no after"),
        (b'{"name": "x", "cron": "* * * * *", "timezone": "Nowhere", "job": {"command": "x"}}',
         "invalid timezone"),
        (b'{"name": "x", "every_secs": 5, "catchup": "all", "job": {"command": "x"}}',
         "invalid catchup"),
    ],
)  # fmt: skip
def test_a_bad_request_is_400_naming_the_field_and_changes_nothing(
    client: TestClient, rclient: redis.Redis, settings: Settings, body: bytes, message: str
) -> None:
    response = client.post("/schedules", content=body)
    assert response.status_code == 400, response.text
    assert response.text.startswith(message), response.text
    keys = Keys(settings.redis_prefix)
    assert not rclient.exists(keys.schedules, keys.schedules_due, keys.schedules_dirty)
    assert client.get("/schedules").json() == []


def test_pause_and_resume(client: TestClient, rclient: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.redis_prefix)
    create(client)
    paused = client.post("/schedules/nightly/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert "next_run_at" not in paused.json()
    assert rclient.zscore(keys.schedules_due, "nightly") is None
    assert client.post("/schedules/nightly/pause").json() == paused.json()  # idempotent
    resumed = client.post("/schedules/nightly/resume").json()
    assert resumed["paused"] is False and resumed["next_run_at"]
    assert rclient.zscore(keys.schedules_due, "nightly") == parse_rfc3339(resumed["next_run_at"])
    assert client.post("/schedules/nightly/resume").json() == resumed


def test_created_paused_is_not_due(
    client: TestClient, rclient: redis.Redis, settings: Settings
) -> None:
    made = create(client, paused=True)
    assert made["paused"] is True and "next_run_at" not in made
    assert rclient.zcard(Keys(settings.redis_prefix).schedules_due) == 0


def test_delete(client: TestClient, rclient: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.redis_prefix)
    create(client)
    assert client.delete("/schedules/nightly").status_code == 204
    assert_text_error(client.get("/schedules/nightly"), 404, "schedule not found")
    assert not rclient.exists(keys.schedules, keys.schedules_due, keys.schedule_names)
    # The deletion is a change the snapshot must see (its row goes).
    assert rclient.sismember(keys.schedules_dirty, "nightly")
    # The name is free again.
    create(client)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/schedules/ghost"),
        ("DELETE", "/schedules/ghost"),
        ("POST", "/schedules/ghost/pause"),
        ("POST", "/schedules/ghost/resume"),
        ("GET", "/schedules/a%20b"),
    ],
)
def test_unknown_names_are_404(client: TestClient, method: str, path: str) -> None:
    assert_text_error(client.request(method, path), 404, "schedule not found")


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=x", "limit=10001", "after=a%2Fb"], ids=lambda q: q
)
def test_a_bad_page_is_400(client: TestClient, query: str) -> None:
    assert client.get(f"/schedules?{query}").status_code == 400


def test_max_schedules(make_client: ClientFactory) -> None:
    client = make_client(max_schedules=2)
    create(client, name="a")
    create(client, name="b")
    assert_text_error(
        client.post("/schedules", json={**NIGHTLY, "name": "c"}),
        503,
        "too many schedules (MAX_SCHEDULES)",
    )
