"""Issue 41, quotas over HTTP (docs/GUIDE.md, Quotas): an admin sets a namespace's quota
(PUT /namespaces/{ns}/quota, audited), any key reads them with each namespace's use (GET
/namespaces, a limited key only its own); a submitter cannot set one; bad input changes
nothing; a submit past the pending quota is 429 through both fronts, alone or in a batch."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.test_namespaces import ADMIN, ADMIN_KEY, make_key, submit
from tests.api.test_roles import as_key
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    """An API with the admin key and node n1."""
    client = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 8, "role": "compute"}
    assert_json(client.post("/nodes/register", json=node, headers=ADMIN), 201)
    return client


def put_quota(
    api: TestClient, namespace: str, headers: dict[str, str] = ADMIN, **quota: Any
) -> Any:
    return api.put(f"/namespaces/{namespace}/quota", json=quota, headers=headers)


def patch_quota(
    api: TestClient, namespace: str, headers: dict[str, str] = ADMIN, **change: Any
) -> Any:
    return api.patch(f"/namespaces/{namespace}/quota", json=change, headers=headers)


# PUT sets the whole quota, PATCH some of its limits: both are an admin's, and refuse alike.
SETTERS = pytest.mark.parametrize("setter", [put_quota, patch_quota], ids=["PUT", "PATCH"])


def namespaces(api: TestClient, headers: dict[str, str] = ADMIN) -> dict[str, Any]:
    listed = assert_json(api.get("/namespaces", headers=headers))
    return {view["name"]: view for view in listed}


BOUNDS = "must be an integer between 0 and 1099511627776"
NO_USE = {"running": 0, "pending": 0, "cpus": 0, "memory_mb": 0, "over_quota": 0}


def test_an_admin_sets_a_quota_and_every_namespace_shows_its_use(api: TestClient) -> None:
    assert namespaces(api) == {"default": {"name": "default", "quota": {}, "use": NO_USE}}
    set_ = assert_json(put_quota(api, "team-a", running=2, pending=10, cpus=4))
    assert set_ == {"running": 2, "pending": 10, "cpus": 4}
    submit(api, ADMIN, namespace="team-a", cpus=2)
    submit(api, ADMIN, namespace="team-b")
    submit(api, ADMIN)
    listed = namespaces(api)
    assert listed["team-a"] == {
        "name": "team-a",
        "quota": {"running": 2, "pending": 10, "cpus": 4},
        "use": {**NO_USE, "pending": 1},
    }
    assert listed["team-b"]["quota"] == {} and listed["team-b"]["use"]["pending"] == 1
    assert listed["default"]["use"]["pending"] == 1
    # The default namespace has a quota of its own, by its name.
    assert_json(put_quota(api, "default", pending=5))
    assert namespaces(api)["default"]["quota"] == {"pending": 5}
    # Every limit 0: no quota.
    assert assert_json(put_quota(api, "team-a", running=0)) == {}
    assert namespaces(api)["team-a"]["quota"] == {}
    audit = assert_json(api.get("/audit", params={"limit": 3}, headers=ADMIN))
    assert [(e["action"], e["name"], e["by"], e["detail"]) for e in audit] == [
        ("quota set", "team-a", "admin", "none"),
        ("quota set", "default", "admin", "pending=5"),
        ("quota set", "team-a", "admin", "running=2 pending=10 cpus=4"),
    ]


def test_a_patch_changes_the_limits_given_and_keeps_the_others(api: TestClient) -> None:
    # On a namespace with no quota, it makes one.
    assert assert_json(patch_quota(api, "team-a", cpus=4)) == {"cpus": 4}
    assert assert_json(patch_quota(api, "team-a", running=2, pending=5)) == {
        "running": 2,
        "pending": 5,
        "cpus": 4,
    }
    # Two admins each changing one limit, whatever each read before: both kept.
    assert_json(patch_quota(api, "team-a", memory_mb=512))
    assert_json(patch_quota(api, "team-a", cpus=8))
    expected = {"running": 2, "pending": 5, "cpus": 8, "memory_mb": 512}
    assert namespaces(api)["team-a"]["quota"] == expected
    # 0 removes that limit, as null does (a JSON merge patch); an empty change changes
    # nothing; none left: no quota.
    assert assert_json(patch_quota(api, "team-a", running=None, pending=5)) == {
        "pending": 5,
        "cpus": 8,
        "memory_mb": 512,
    }
    assert assert_json(patch_quota(api, "team-a", running=0)) == {
        "pending": 5,
        "cpus": 8,
        "memory_mb": 512,
    }
    assert assert_json(patch_quota(api, "team-a")) == {"pending": 5, "cpus": 8, "memory_mb": 512}
    assert assert_json(patch_quota(api, "team-a", pending=0, cpus=0, memory_mb=0)) == {}
    assert "team-a" not in namespaces(api)  # neither a quota nor jobs
    audit = assert_json(api.get("/audit", params={"limit": 2}, headers=ADMIN))
    assert [(e["action"], e["name"], e["detail"]) for e in audit] == [
        ("quota set", "team-a", "pending=0 cpus=0 memory_mb=0 (others kept)"),
        ("quota set", "team-a", "nothing (others kept)"),
    ]


@SETTERS
def test_only_an_admin_sets_a_quota_and_a_limited_key_sees_its_namespaces(
    api: TestClient, setter: Any
) -> None:
    submitter = make_key(api, "ci", "submitter", ["team-a"])
    operator = make_key(api, "ops", "operator", [])
    for key in (submitter, operator):
        refused = setter(api, "team-a", as_key(key), running=100)
        assert refused.status_code == 403
    assert namespaces(api).get("team-a", {}).get("quota", {}) == {}
    assert_json(put_quota(api, "team-b", running=1))
    assert_json(put_quota(api, "team-a", running=3))
    # A key limited to team-a reads team-a alone; an unlimited one every namespace.
    assert list(namespaces(api, as_key(submitter))) == ["team-a"]
    assert list(namespaces(api, as_key(operator))) == ["default", "team-a", "team-b"]
    assert api.get("/namespaces").status_code == 401


@SETTERS
def test_a_key_limited_to_namespaces_sets_no_quota_even_an_admins(
    api: TestClient, setter: Any
) -> None:
    """A quota limits a team: a team's own admin key (limited to its namespaces) would lift
    it, and another team's is none of its business. Only a key of every namespace sets one
    (Kubernetes' namespace admin reads its ResourceQuota, never writes it)."""
    team_admin = make_key(api, "team-a-admin", "admin", ["team-a"])
    assert_json(put_quota(api, "team-a", running=2, pending=5))
    for namespace in ("team-a", "team-b"):
        refused = setter(api, namespace, as_key(team_admin), running=100)
        assert_text_error(
            refused,
            403,
            "forbidden: the key 'team-a-admin' is limited to namespaces: a quota is set by a "
            "key of every namespace",
        )
    assert namespaces(api)["team-a"]["quota"] == {"running": 2, "pending": 5}
    assert "team-b" not in namespaces(api)
    # It reads its own namespace's quota, as any key of it.
    assert namespaces(api, as_key(team_admin))["team-a"]["quota"] == {"running": 2, "pending": 5}


@pytest.mark.parametrize(
    ("namespace", "body", "message"),
    [
        ("team-a", {"running": -1}, f"invalid quota: running: {BOUNDS}"),
        ("team-a", {"cpus": 2**41}, f"invalid quota: cpus: {BOUNDS}"),
        ("team-a", {"gpus": 1}, "invalid quota: gpus: unknown field (did you mean cpus?)"),
        ("team-a", {"pending": "5"}, "invalid quota: pending:"),
        ("team-a", [1], "invalid quota:"),
        ("Team_A", {"running": 1}, "invalid namespace 'Team_A'"),
    ],
)
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_bad_input_is_400_and_changes_nothing(
    api: TestClient, namespace: str, body: Any, message: str, method: str
) -> None:
    assert_json(put_quota(api, "team-a", running=2))
    path = f"/namespaces/{namespace}/quota"
    refused = api.request(method, path, json=body, headers=ADMIN)
    assert refused.status_code == 400
    assert refused.text.startswith(message), refused.text
    assert namespaces(api)["team-a"]["quota"] == {"running": 2}
    assert "Team_A" not in namespaces(api)


@BOTH_FRONTS
def test_a_submit_past_the_pending_quota_is_429_and_makes_nothing(api: TestClient) -> None:
    assert_json(put_quota(api, "team-a", pending=1))
    submit(api, ADMIN, namespace="team-a")
    refused = api.post("/jobs", json={"command": "x", "namespace": "team-a"}, headers=ADMIN)
    assert_text_error(
        refused,
        429,
        "over quota: namespace 'team-a' holds 1 pending jobs (pending, delayed or waiting) and "
        "its quota allows 1; nothing was made",
    )
    assert namespaces(api)["team-a"]["use"]["pending"] == 1
    # A key limited to team-a submitting without naming it meets the same quota.
    key = make_key(api, "ci", "submitter", ["team-a"])
    assert api.post("/jobs", json={"command": "x"}, headers=as_key(key)).status_code == 429
    # In a batch, each job past the quota is refused alone; the others are made.
    batch = {"jobs": [{"command": "x", "namespace": "team-a"}, {"command": "x"}]}
    entries = assert_json(api.post("/jobs/batch", json=batch, headers=ADMIN))["jobs"]
    assert entries[0]["status"] == 429 and entries[0]["error"].startswith("over quota")
    assert "job_id" in entries[1]
    assert namespaces(api)["team-a"]["use"]["pending"] == 1


@BOTH_FRONTS
def test_a_job_asking_more_than_its_namespace_may_run_is_429(api: TestClient) -> None:
    assert_json(put_quota(api, "team-a", memory_mb=512))
    refused = api.post(
        "/jobs", json={"command": "x", "namespace": "team-a", "memory_mb": 1024}, headers=ADMIN
    )
    assert_text_error(
        refused,
        429,
        "over quota: the job asks 1024 memory_mb and the quota of namespace 'team-a' allows 512 "
        "memory_mb running at once; nothing was made",
    )
    submit(api, ADMIN, namespace="team-a", memory_mb=512)
