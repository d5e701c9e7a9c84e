"""Issue 41, named keys: what a key holder might try beyond its role, and what a stranger might
try with the keys (docs/SECURITY.md, Named keys, and its table of attacks). Through ASGI and
through the hot lane (tests/conftest.py, front) wherever the lane takes the call."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.models.access_key import Role
from scheduler.store.keys import Keys
from tests.api.test_roles import ADMIN_KEY, AS_ADMIN, as_key, forbidden, make_key, role_keys
from tests.conftest import (
    BOTH_FRONTS,
    ClientFactory,
    Json,
    assert_json,
    assert_text_error,
)
from tests.fakes import eventually

SECRET_ENV = {"DB_PASSWORD": "hunter2", "PLAIN": "also-hidden"}
HIDDEN_ENV = dict.fromkeys(SECRET_ENV, "(hidden)")
LIMIT = 5  # AUTH_FAILURES_MAX here: wrong credentials an address sends before 429

Keyed = tuple[TestClient, dict[str, str]]


@pytest.fixture
def keyed(make_client: ClientFactory) -> Keyed:
    """An API with the admin key, node n1, job-1 pending on it with secret env_vars, schedule
    s1 whose template has them, and a named key of each role: (client, {role: key})."""
    api = make_client(api_key=ADMIN_KEY, auth_failures_max=LIMIT)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(api.post("/nodes/register", json=node, headers=AS_ADMIN), 201)
    job = {"command": "x", "env_vars": SECRET_ENV}
    assert_json(api.post("/jobs", json=job, headers=AS_ADMIN), 201)
    schedule = {"name": "s1", "every_secs": 3600, "job": job}
    assert_json(api.post("/schedules", json=schedule, headers=AS_ADMIN), 201)
    return api, role_keys(api)


def job_ids(api: TestClient) -> list[str]:
    return [job["job_id"] for job in assert_json(api.get("/jobs", headers=AS_ADMIN))]


def job_status(api: TestClient, job_id: str = "job-1") -> str:
    status: str = assert_json(api.get(f"/jobs/{job_id}", headers=AS_ADMIN))["status"]
    return status


def node_of(api: TestClient, node: str = "n1") -> Json:
    found: Json = assert_json(api.get("/nodes", headers=AS_ADMIN))[node]
    return found


# A reader reads; it changes nothing.


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("path", "body"),
    [("/jobs", {"command": "x"}), ("/jobs/batch", {"jobs": [{"command": "x"}]})],
)
def test_a_reader_cannot_submit(keyed: Keyed, path: str, body: Any) -> None:
    api, keys = keyed
    before = job_ids(api)
    response = api.post(path, json=body, headers=as_key(keys["reader"]))
    assert_text_error(response, 403, forbidden("reader", Role.SUBMITTER))
    assert job_ids(api) == before == ["job-1"]


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", "/jobs/job-1", None),
        ("POST", "/jobs/job-1/retry", None),
        ("POST", "/jobs/retry", {"job_ids": ["job-1"]}),
    ],
)
def test_a_reader_cannot_cancel_or_retry(keyed: Keyed, method: str, path: str, body: Any) -> None:
    api, keys = keyed
    response = api.request(method, path, json=body, headers=as_key(keys["reader"]))
    assert_text_error(response, 403, forbidden("reader", Role.SUBMITTER))
    assert job_status(api) == "pending"


@BOTH_FRONTS
@pytest.mark.parametrize(
    "path",
    ["/jobs/job-1", "/jobs/job-1?wait=5&status_not=running", "/jobs", "/jobs?status=pending"],
)
def test_a_reader_sees_env_vars_names_not_their_values(keyed: Keyed, path: str) -> None:
    api, keys = keyed
    for role, env in (("reader", HIDDEN_ENV), ("submitter", SECRET_ENV)):
        found = assert_json(api.get(path, headers=as_key(keys[role])))
        job = found if isinstance(found, dict) else found[0]
        assert job["env_vars"] == env, role
        if role == "reader":
            assert "hunter2" not in str(found)
    assert assert_json(api.get("/jobs/job-1", headers=AS_ADMIN))["env_vars"] == SECRET_ENV


@pytest.mark.parametrize("path", ["/schedules", "/schedules/s1"])
def test_a_reader_sees_a_schedules_env_vars_names_not_their_values(keyed: Keyed, path: str) -> None:
    api, keys = keyed
    for role, env in (("reader", HIDDEN_ENV), ("operator", SECRET_ENV)):
        found = assert_json(api.get(path, headers=as_key(keys[role])))
        schedule = found if isinstance(found, dict) else found[0]
        assert schedule["job"]["env_vars"] == env, role


# A submitter submits; it runs no node and no schedule.


@pytest.mark.parametrize("path", ["/nodes/n1/drain", "/nodes/n1/undrain"])
def test_a_submitter_cannot_drain_or_undrain_a_node(keyed: Keyed, path: str) -> None:
    api, keys = keyed
    response = api.post(path, headers=as_key(keys["submitter"]))
    assert_text_error(response, 403, forbidden("submitter", Role.OPERATOR))
    assert "drained" not in node_of(api)


def test_a_submitter_cannot_delete_a_node_or_a_schedule(keyed: Keyed) -> None:
    api, keys = keyed
    for path in ("/nodes/n1", "/schedules/s1"):
        response = api.delete(path, headers=as_key(keys["submitter"]))
        assert_text_error(response, 403, forbidden("submitter", Role.OPERATOR))
    assert node_of(api)["id"] == "n1"
    assert_json(api.get("/schedules/s1", headers=AS_ADMIN))


def test_an_operator_drains_undrains_and_deletes_a_node(keyed: Keyed) -> None:
    api, keys = keyed
    operator = as_key(keys["operator"])
    assert assert_json(api.post("/nodes/n1/drain", headers=operator))["drained_by"] == "operator"
    assert node_of(api)["drained_by"] == "operator"
    assert assert_json(api.post("/nodes/n1/undrain", headers=operator))["undrained"] is True
    assert "drained" not in node_of(api)
    assert api.delete("/nodes/n1", headers=operator).status_code == 204
    assert "n1" not in assert_json(api.get("/nodes", headers=AS_ADMIN))


@pytest.mark.parametrize("role", ["submitter", "operator"])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/keys", None),
        ("POST", "/keys", {"name": "mine", "role": "admin"}),
        ("DELETE", "/keys/reader-key", None),
        ("GET", "/audit", None),
    ],
)
def test_only_an_admin_manages_keys(
    keyed: Keyed, role: str, method: str, path: str, body: Any
) -> None:
    api, keys = keyed
    before = assert_json(api.get("/keys", headers=AS_ADMIN))
    response = api.request(method, path, json=body, headers=as_key(keys[role]))
    assert_text_error(response, 403, forbidden(role, Role.ADMIN))
    assert assert_json(api.get("/keys", headers=AS_ADMIN)) == before
    assert api.get("/jobs/job-1", headers=as_key(keys["reader"])).status_code == 200


def test_a_named_admin_key_manages_keys(keyed: Keyed) -> None:
    api, keys = keyed
    admin = as_key(keys["admin"])
    made = assert_json(api.post("/keys", json={"name": "ci", "role": "reader"}, headers=admin), 201)
    assert made["created_by"] == "admin-key"
    assert api.delete("/keys/ci", headers=admin).status_code == 204


# Revoked: at once here, within KEYRING_REFRESH_SECS on every other replica.


@BOTH_FRONTS
def test_a_revoked_key_stops_at_once_here_and_soon_on_another_replica(
    make_client: ClientFactory,
) -> None:
    here = make_client(api_key=ADMIN_KEY, keyring_refresh_secs=0.1)
    there = make_client(api_key=ADMIN_KEY, keyring_refresh_secs=0.1)
    key = as_key(make_key(here, "ci", "reader"))
    assert here.get("/jobs", headers=key).status_code == 200  # at once, here
    eventually(lambda: there.get("/jobs", headers=key).status_code == 200, timeout=30)  # made there
    assert here.delete("/keys/ci", headers=AS_ADMIN).status_code == 204
    assert_text_error(here.get("/jobs", headers=key), 401, "unauthorized")
    assert_text_error(here.get("/jobs/job-1", headers=key), 401, "unauthorized")
    eventually(lambda: there.get("/jobs", headers=key).status_code == 401, timeout=30)  # revoked
    assert_text_error(there.get("/jobs/job-1", headers=key), 401, "unauthorized")


# Counted: a wrong key is a guess; a right key of too low a role is not.


def submits(api: TestClient, headers: dict[str, str]) -> list[int]:
    """40 submits with `headers`: their statuses."""
    return [
        api.post("/jobs", json={"command": "x"}, headers=headers).status_code for _ in range(40)
    ]


@BOTH_FRONTS
def test_a_too_low_role_is_never_counted(keyed: Keyed) -> None:
    api, keys = keyed
    assert set(submits(api, as_key(keys["reader"]))) == {403}
    # The address has guessed nothing: its next wrong key is a plain 401.
    assert_text_error(api.get("/jobs", headers=as_key("wrong")), 401, "unauthorized")


@BOTH_FRONTS
def test_wrong_keys_are_counted(keyed: Keyed) -> None:
    api, keys = keyed
    statuses = submits(api, as_key(keys["reader"][:-1] + "x"))
    assert statuses[:LIMIT] == [401] * LIMIT
    assert set(statuses[LIMIT + 1 :]) == {429}
    # The right key is served all the same, at its role.
    assert api.get("/jobs/job-1", headers=as_key(keys["reader"])).status_code == 200
    assert (
        api.post("/jobs", json={"command": "x"}, headers=as_key(keys["reader"])).status_code == 403
    )


@BOTH_FRONTS
def test_a_key_that_differs_in_one_character_is_wrong(keyed: Keyed) -> None:
    api, keys = keyed
    key = keys["admin"]
    flip = {"a": "b"}.get(key[-1], "a")
    # LIMIT of them: each a wrong credential, counted (the next would be 429).
    for near in (key[:-1] + flip, key[:-1], key + "a", "tka_", key[4:]):
        assert_text_error(api.get("/jobs/job-1", headers=as_key(near)), 401, "unauthorized")
    assert job_ids(api) == ["job-1"]


# What is kept and shown of a key.


def everything_in(rclient: redis.Redis, prefix: str) -> bytes:
    """Every key of the deployment and every value in it, as one blob."""
    blob = []
    for name in rclient.scan_iter(match=f"*{prefix}*", count=1000):
        blob.append(name)
        kind = rclient.type(name)
        if kind == b"string":
            blob.append(rclient.get(name) or b"")
        elif kind == b"hash":
            blob += [part for pair in rclient.hgetall(name).items() for part in pair]
        elif kind == b"list":
            blob += rclient.lrange(name, 0, -1)
        elif kind == b"set":
            blob += list(rclient.smembers(name))
        elif kind == b"zset":
            blob += rclient.zrange(name, 0, -1)
        elif kind == b"stream":
            for _, fields in rclient.xrange(name):
                blob += [part for pair in fields.items() for part in pair]
        else:
            raise AssertionError(f"{name!r}: {kind!r} not read")
    return b"\n".join(blob)


def test_redis_keeps_a_keys_hash_never_the_key(
    keyed: Keyed, rclient: redis.Redis, prefix: str
) -> None:
    _, keys = keyed
    stored = everything_in(rclient, prefix)
    for key in keys.values():
        assert key.encode() not in stored
        assert key[4:].encode() not in stored  # nor its random part
        assert hashlib.sha256(key.encode()).hexdigest().encode() in stored
    assert ADMIN_KEY.encode() not in stored


def test_the_audit_stream_says_who_made_and_revoked_a_key(
    keyed: Keyed, rclient: redis.Redis, prefix: str
) -> None:
    api, keys = keyed
    assert api.delete("/keys/reader-key", headers=as_key(keys["admin"])).status_code == 204
    said = [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in rclient.xrange(Keys(prefix).audit)
    ]
    assert [(s["action"], s["name"], s["by"]) for s in said] == [
        ("key add", "reader-key", "admin"),
        ("key add", "submitter-key", "admin"),
        ("key add", "operator-key", "admin"),
        ("key add", "admin-key", "admin"),
        ("key revoke", "reader-key", "admin-key"),
    ]


def test_get_keys_never_shows_a_key(keyed: Keyed) -> None:
    api, keys = keyed
    response = api.get("/keys", headers=AS_ADMIN)
    listed = assert_json(response)
    assert [k["name"] for k in listed] == [
        "admin-key",
        "operator-key",
        "reader-key",
        "submitter-key",
    ]
    assert all(set(k) == {"name", "role", "created_at", "created_by", "namespaces"} for k in listed)
    assert "tka_" not in response.text
    assert all(key not in response.text for key in keys.values())


# Making keys: who may, and what.


def test_no_named_key_without_the_admin_key(make_client: ClientFactory) -> None:
    api = make_client()  # no TINYAWS_API_KEY: the API asks no key
    response = api.post("/keys", json={"name": "ci", "role": "reader"})
    assert_text_error(
        response, 409, "named keys need TINYAWS_API_KEY set: without it the API asks no key"
    )
    assert assert_json(api.get("/keys")) == []


@pytest.mark.parametrize("name", ["admin", "anyone"])
def test_reserved_names_are_refused(keyed: Keyed, name: str) -> None:
    api, _ = keyed
    response = api.post("/keys", json={"name": name, "role": "reader"}, headers=AS_ADMIN)
    assert response.status_code == 400, response.text
    assert name in response.text and "reserved" in response.text
    assert all(k["name"] != name for k in assert_json(api.get("/keys", headers=AS_ADMIN)))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "ci", "role": "root"}, "role"),
        ({"name": "ci", "role": ""}, "role"),
        ({"name": "ci"}, "role"),
        ({"name": "CI", "role": "reader"}, "name"),
        ({"name": "../x", "role": "reader"}, "name"),
        ({"name": "", "role": "reader"}, "name"),
        ({"name": "x" * 65, "role": "reader"}, "name"),
        ({"role": "reader"}, "name"),
        ({"name": 7, "role": "reader"}, "name"),
    ],
)
def test_a_bad_name_or_role_is_refused_naming_the_field(
    keyed: Keyed, body: Json, field: str
) -> None:
    api, _ = keyed
    before = assert_json(api.get("/keys", headers=AS_ADMIN))
    response = api.post("/keys", json=body, headers=AS_ADMIN)
    assert response.status_code == 400, response.text
    assert f"{field}: " in response.text
    assert assert_json(api.get("/keys", headers=AS_ADMIN)) == before


def test_a_taken_name_is_refused(keyed: Keyed) -> None:
    api, _ = keyed
    response = api.post("/keys", json={"name": "reader-key", "role": "admin"}, headers=AS_ADMIN)
    assert response.status_code == 409, response.text
    listed = assert_json(api.get("/keys", headers=AS_ADMIN))
    assert {k["name"]: k["role"] for k in listed}["reader-key"] == "reader"


@pytest.mark.parametrize("name", ["ghost", "Reader-Key", "a" * 65])
def test_revoking_a_key_no_one_has_is_404(keyed: Keyed, name: str) -> None:
    api, _ = keyed
    before = assert_json(api.get("/keys", headers=AS_ADMIN))
    assert_text_error(api.delete(f"/keys/{name}", headers=AS_ADMIN), 404, "key not found")
    assert assert_json(api.get("/keys", headers=AS_ADMIN)) == before


# Agent calls: a node's token makes them, never a named key (AGENT_AUTH=token).

NODE = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
AGENT_CALLS = [
    ("GET", "/jobs?node_id=n1&status=pending", None),  # the poll: the lane's
    ("PATCH", "/jobs/job-1", {"status": "running", "node_id": "n1"}),  # a report: the lane's
    ("POST", "/nodes/register", {**NODE, "id": "n2", "hostname": "n2"}),
    ("POST", "/nodes/register", NODE),
    ("POST", "/nodes/heartbeat", {"id": "n1"}),
    ("POST", "/jobs/job-1/output", {"node_id": "n1", "stream": "stdout", "offset": 0, "data": "x"}),
    ("GET", "/instances?node_id=n1", None),
    ("POST", "/services", {"node_id": "n1", "instance_id": "i1", "port": 80, "pid": 1}),
    ("GET", "/services?node_id=n1", None),
    ("PATCH", "/services/svc-1", {"status": "stopped"}),
]


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "path", "body"), AGENT_CALLS, ids=[f"{m} {p}" for m, p, _ in AGENT_CALLS]
)
def test_a_named_key_makes_no_agent_call(
    make_client: ClientFactory, method: str, path: str, body: Any
) -> None:
    api = make_client(api_key=ADMIN_KEY, agent_auth="token", auth_failures_max=LIMIT)
    token = assert_json(api.post("/nodes/register", json=NODE, headers=AS_ADMIN), 201)["token"]
    assert_json(api.post("/jobs", json={"command": "x"}, headers=AS_ADMIN), 201)
    keys = role_keys(api)
    nodes = assert_json(api.get("/nodes", headers=AS_ADMIN))
    for _ in range(2 * LIMIT // len(keys) + 1):  # past LIMIT: none is counted
        for role, key in keys.items():
            response = api.request(method, path, json=body, headers=as_key(key))
            assert_text_error(
                response,
                403,
                f"forbidden: the key '{role}-key' is a named key; named keys make no agent "
                "calls: a node's token does",
            )
    assert job_status(api) == "pending"
    assert assert_json(api.get("/nodes", headers=AS_ADMIN)).keys() == nodes.keys()
    assert_text_error(api.get("/jobs", headers=as_key("wrong")), 401, "unauthorized")
    # The node's token makes it, as ever (a new node's registration: the admin key).
    right = ADMIN_KEY if body == AGENT_CALLS[2][2] else token
    answer = api.request(method, path, json=body, headers=as_key(right))
    assert answer.status_code not in (401, 403), answer.text


# AGENT_NETWORKS: the admin key passes from anywhere; a named key only to the operator's node
# routes, where its role decides.

OUTSIDE = "10.99.0.0/16"  # the agents' network: the tests' 127.0.0.1 is outside it


@pytest.fixture
def outside(make_client: ClientFactory) -> Keyed:
    """`keyed`'s deployment in open agent mode, the tests' address outside AGENT_NETWORKS."""
    api = make_client(api_key=ADMIN_KEY, agent_networks=OUTSIDE, auth_failures_max=LIMIT)
    assert_json(api.post("/nodes/register", json=NODE, headers=AS_ADMIN), 201)
    job = {"command": "x", "env_vars": SECRET_ENV}
    assert_json(api.post("/jobs", json=job, headers=AS_ADMIN), 201)
    return api, role_keys(api)


@BOTH_FRONTS
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [call for call in AGENT_CALLS if "register" not in call[1]]
    + [("POST", "/nodes/register", {**NODE, "id": "n2", "hostname": "n2"})],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_named_key_opens_no_agent_call_outside_agent_networks(
    outside: Keyed, method: str, path: str, body: Any
) -> None:
    """In open mode an agent call takes anyone inside AGENT_NETWORKS: a named key passing the
    networks' rule as the admin key does would claim jobs and read their env_vars (a
    reader's hidden values), forge reports, register nodes, from anywhere."""
    api, keys = outside
    nodes = assert_json(api.get("/nodes", headers=AS_ADMIN))
    for _ in range(2 * LIMIT // len(keys) + 1):  # past LIMIT: none is counted
        for key in keys.values():
            response = api.request(method, path, json=body, headers=as_key(key))
            assert_text_error(
                response, 403, "forbidden: agent calls are open to AGENT_NETWORKS only"
            )
    assert job_status(api) == "pending"
    assert assert_json(api.get("/nodes", headers=AS_ADMIN)).keys() == nodes.keys()
    assert_text_error(api.get("/jobs", headers=as_key("wrong")), 401, "unauthorized")


def test_a_named_operator_drains_a_node_from_outside_agent_networks(outside: Keyed) -> None:
    api, keys = outside
    response = api.post("/nodes/n1/drain", headers=as_key(keys["submitter"]))
    assert_text_error(response, 403, forbidden("submitter", Role.OPERATOR))
    drained = assert_json(api.post("/nodes/n1/drain", headers=as_key(keys["operator"])))
    assert drained["drained_by"] == "operator"


@BOTH_FRONTS
def test_a_named_key_registering_in_open_mode_is_not_counted(keyed: Keyed) -> None:
    """Open mode: a registration takes anyone, and one of a known id answers a bearer that is
    neither the admin key nor the node's token without a token, counting it as a wrong
    credential; a named key is right, so it is not counted, however often."""
    api, keys = keyed
    for _ in range(2 * LIMIT // len(keys) + 1):
        for key in keys.values():
            answer = assert_json(api.post("/nodes/register", json=NODE, headers=as_key(key)), 201)
            assert "token" not in answer
    assert_text_error(api.get("/jobs", headers=as_key("wrong")), 401, "unauthorized")
