"""Issue 41, namespaces (models/namespace.py): where a submitted job goes, by what it names and
which key submits it; through ASGI and the hot lane (tests/conftest.py, front)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.api.test_roles import as_key
from tests.conftest import BOTH_FRONTS, ClientFactory, Json, assert_json, assert_text_error

ADMIN_KEY = "namespaces-test-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def make_key(api: TestClient, name: str, role: str, namespaces: list[str]) -> str:
    body = {"name": name, "role": role, "namespaces": namespaces}
    made = assert_json(api.post("/keys", json=body, headers=ADMIN), 201)
    assert made["namespaces"] == namespaces
    key: str = made["key"]
    return key


@pytest.fixture
def api(make_client: ClientFactory) -> TestClient:
    """An API with the admin key and node n1."""
    client = make_client(api_key=ADMIN_KEY)
    node = {"id": "n1", "hostname": "n1", "cpu_count": 2, "role": "compute"}
    assert_json(client.post("/nodes/register", json=node, headers=ADMIN), 201)
    return client


def submit(api: TestClient, headers: dict[str, str], **job: object) -> Json:
    made: Json = assert_json(api.post("/jobs", json={"command": "x", **job}, headers=headers), 201)
    return made


@BOTH_FRONTS
def test_a_job_naming_none_is_the_default_namespaces_and_the_wire_omits_it(
    api: TestClient,
) -> None:
    made = submit(api, ADMIN)
    assert "namespace" not in made
    assert "namespace" not in submit(api, ADMIN, namespace="default")


@BOTH_FRONTS
def test_a_job_keeps_the_namespace_it_names(api: TestClient) -> None:
    made = submit(api, ADMIN, namespace="team-a")
    assert made["namespace"] == "team-a"
    again = assert_json(api.get(f"/jobs/{made['job_id']}", headers=ADMIN))
    assert again["namespace"] == "team-a"


@BOTH_FRONTS
def test_a_limited_keys_job_goes_to_its_first_namespace(api: TestClient) -> None:
    key = make_key(api, "a", "submitter", ["team-a", "team-c"])
    assert submit(api, as_key(key))["namespace"] == "team-a"
    assert submit(api, as_key(key), namespace="team-c")["namespace"] == "team-c"
    made = submit(api, as_key(key))
    assert made["submitted_by"] == "a"


@BOTH_FRONTS
@pytest.mark.parametrize("path", ["/jobs", "/jobs/batch"])
def test_a_limited_key_cannot_submit_into_another_namespace(api: TestClient, path: str) -> None:
    key = make_key(api, "a", "submitter", ["team-a"])
    job = {"command": "x", "namespace": "team-b"}
    response = api.post(path, json=job if path == "/jobs" else {"jobs": [job]}, headers=as_key(key))
    message = "forbidden: the key 'a' may use the namespaces team-a; not 'team-b'"
    if path == "/jobs":
        assert_text_error(response, 403, message)
    else:
        assert assert_json(response)["jobs"][0] == {"error": message, "status": 403}
    assert assert_json(api.get("/jobs", headers=ADMIN)) == []


@BOTH_FRONTS
@pytest.mark.parametrize("name", ["Team", "-a", "a_b", "x" * 64, "a-"])
def test_a_namespace_that_is_not_a_dns_label_is_refused(api: TestClient, name: str) -> None:
    response = api.post("/jobs", json={"command": "x", "namespace": name}, headers=ADMIN)
    assert response.status_code == 400
    assert "invalid namespace" in response.text
    assert assert_json(api.get("/jobs", headers=ADMIN)) == []


def test_a_key_limited_to_a_namespace_that_is_not_a_dns_label_is_not_made(
    api: TestClient,
) -> None:
    body = {"name": "a", "role": "reader", "namespaces": ["Team"]}
    response = api.post("/keys", json=body, headers=ADMIN)
    assert response.status_code == 400 and "namespaces" in response.text
    assert assert_json(api.get("/keys", headers=ADMIN)) == []


def test_a_bad_name_is_told_in_words_not_as_a_regex(api: TestClient) -> None:
    """A key's or a namespace's name rule, as a refused body says it (models/rules.py
    in_words)."""
    response = api.post("/keys", json={"name": "CI-Upper", "role": "reader"}, headers=ADMIN)
    assert_text_error(
        response,
        400,
        "invalid key: name: must be a string of 1 to 64 characters of a-z 0-9 . _ -, the "
        "first a letter or digit",
    )
    body = {"name": "a", "role": "reader", "namespaces": ["Team"]}
    said = api.post("/keys", json=body, headers=ADMIN).text
    assert "1 to 63 characters of a-z 0-9 -, the first and last a letter or digit" in said
    assert "^" not in said
    assert assert_json(api.get("/keys", headers=ADMIN)) == []
