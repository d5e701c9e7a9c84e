"""GET /openapi.json (issue 42, item 1): every route of the route table described, and nothing
else, with the parameters each reads; a valid OpenAPI 3.1 document; real answers of the real
app (a real redis-server) valid against it; and behind the key as the rest of the API."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.testclient import TestClient

from scheduler.api.described import EVENTS, TEXT
from scheduler.api.openapi import document
from scheduler.api.openapi_params import PATH, QUERY
from scheduler.api.routes import TABLE
from scheduler.api.routing import Access
from tests.conftest import BOTH_FRONTS, ClientFactory, register

KEY = "openapi-key"
BEARER = {"Authorization": f"Bearer {KEY}"}
DOC = "urn:openapi"
Json = dict[str, Any]


def described() -> Json:
    return document(TABLE)


def table_operations() -> set[tuple[str, str]]:
    return {
        (entry.route.path_format, name.lower()) for entry in TABLE.entries for name in entry.methods
    }


def test_every_route_is_described_and_nothing_else() -> None:
    doc = described()
    operations = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert operations == table_operations()
    assert len(operations) == sum(len(entry.methods) for entry in TABLE.entries)


def test_each_operation_names_the_parameters_its_method_reads() -> None:
    doc = described()
    for entry in TABLE.entries:
        for name, method in entry.methods.items():
            given = doc["paths"][entry.route.path_format][name.lower()]["parameters"]
            query = {p["name"] for p in given if p["in"] == "query"}
            path = {p["name"] for p in given if p["in"] == "path"}
            assert query == set(method.reads), (entry.path, name)
            assert path == set(entry.route.param_convertors), (entry.path, name)


def test_every_method_says_what_it_does_and_answers() -> None:
    """A new route is described as it is added: its summary and at least one answer."""
    for entry in TABLE.entries:
        for name, method in entry.methods.items():
            assert method.summary and method.answers, (entry.path, name)


def test_every_parameter_name_has_one_description_and_none_is_left_over() -> None:
    """One place says what each name means (openapi_params.py): a name a method starts to
    read needs its line there, and a name no method reads any more goes."""
    reads = {name for entry in TABLE.entries for m in entry.methods.values() for name in m.reads}
    assert set(QUERY) == reads
    in_paths = {name for entry in TABLE.entries for name in entry.route.param_convertors}
    assert set(PATH) == in_paths


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = described()
    validate(doc, cls=OpenAPIV31SpecValidator)
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    broken = copy.deepcopy(doc)
    broken["paths"]["/jobs"]["get"]["responses"] = "none"
    with pytest.raises(Exception, match="none"):  # the validator does find a broken one
        validate(broken, cls=OpenAPIV31SpecValidator)


def test_operation_ids_are_unique() -> None:
    doc = described()
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_the_key_rule(make_client: ClientFactory) -> None:
    """Served without a key only where the rest of the API is: with a key set, 401 without
    it; without a key configured, to anyone."""
    keyed = make_client(api_key=KEY)
    assert keyed.get("/openapi.json").status_code == 401
    assert keyed.get("/jobs").status_code == 401
    answer = keyed.get("/openapi.json", headers=BEARER)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == json.loads(json.dumps(described()))
    open_api = make_client()
    assert open_api.get("/openapi.json").json()["openapi"] == "3.1.0"
    assert open_api.get("/openapi.json").json()["servers"] == [{"url": "/"}]


def test_behind_a_root_path_the_server_says_it(make_settings: Any) -> None:
    """uvicorn's --root-path (a proxy strips the prefix): the paths a client calls start with
    it, so the document's server is it."""
    from scheduler.api.app import create_app

    with TestClient(create_app(make_settings()), root_path="/scheduler") as client:
        answer = client.get("/scheduler/openapi.json")
    assert answer.status_code == 200
    assert answer.json()["servers"] == [{"url": "/scheduler"}]


# Real answers, validated against the document.


def strict(doc: Json) -> Json:
    """The document with every object schema closed (additionalProperties false): an answer
    holding a field the document does not describe fails (a test's strictness only: the
    published document leaves answers open to new fields)."""
    doc = copy.deepcopy(doc)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(doc["components"]["schemas"])
    return doc


def pointer(*parts: str) -> str:
    return "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)


class Checker:
    """Validates a response against what the document says of its path, method and status."""

    def __init__(self, doc: Json) -> None:
        self.doc = strict(doc)
        resource = Resource.from_contents(self.doc, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(DOC, resource)
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(self, response: Any, template: str) -> Any:
        method = response.request.method.lower()
        status = response.status_code
        responses = self.doc["paths"][template][method]["responses"]
        key = str(status) if str(status) in responses else "default"
        declared = responses[key]
        self.seen.add((template, method, status))
        content = declared.get("content", {})
        if not content:
            assert response.content == b"", (template, method, status)
            if status == 303:
                assert response.headers["location"]
            return None
        media = response.headers["content-type"]
        assert media in content, (template, method, status, media, list(content))
        if media != "application/json":
            return response.text
        body = response.json()
        where = pointer("paths", template, method, "responses", key, "content", media, "schema")
        self.validate(body, f"{DOC}#/{where}")
        return body

    def validate(self, value: Any, ref: str) -> None:
        validator = jsonschema.Draft202012Validator({"$ref": ref}, registry=self.registry)
        validator.validate(value)

    def events(self, response: Any, template: str) -> list[tuple[str, Any]]:
        """A stream's events, each `data` validated against its event's model."""
        self(response, template)
        method = response.request.method.lower()
        media = pointer("paths", template, method, "responses", "200", "content")
        found = []
        for block in response.text.split("\n\n"):
            name = re.search(r"^event: (.+)$", block, re.M)
            data = re.search(r"^data: (.+)$", block, re.M)
            if name and data:
                value = json.loads(data[1])
                models = self.doc["paths"][template][method]["responses"]["200"]["content"]
                if name[1] in models[EVENTS].get("x-events", {}):
                    where = f"{media}/{pointer(EVENTS, 'x-events', name[1])}"
                    self.validate(value, f"{DOC}#/{where}")
                found.append((name[1], value))
        return found


@pytest.fixture
def checked(make_client: ClientFactory) -> Iterator[tuple[TestClient, Checker]]:
    api = make_client(api_key=KEY)
    api.headers.update(BEARER)
    yield api, Checker(api.get("/openapi.json").json())


def json_operations(doc: Json) -> set[tuple[str, str, int]]:
    """Every (path, method, status) the document answers with JSON, but a 4xx's."""
    return {
        (path, method, int(status))
        for path, item in doc["paths"].items()
        for method, op in item.items()
        for status, answer in op["responses"].items()
        if status < "400" and "application/json" in answer.get("content", {})
    }


@BOTH_FRONTS
def test_real_answers_validate_against_the_document(checked: tuple[TestClient, Checker]) -> None:
    """A scenario through every route answering JSON, each answer validated; then every
    JSON answer the document declares was met. Through the hot lane's server too, which
    answers the hot calls itself."""
    api, check = checked
    jobs_scenario(api, check)
    keys_scenario(api, check)
    quotas_scenario(api, check)
    schedules_nodes_and_services(api, check)
    assert json_operations(check.doc) - check.seen == set()


def test_an_answer_with_a_field_not_described_fails(checked: tuple[TestClient, Checker]) -> None:
    api, check = checked
    answer = api.get("/health")
    where = f"{DOC}#/{pointer('paths', '/health', 'get', 'responses', '200', 'content')}"
    check.validate(answer.json(), f"{where}/{pointer('application/json', 'schema')}")
    with pytest.raises(jsonschema.ValidationError, match="extra"):
        check.validate(
            {**answer.json(), "extra": 1}, f"{where}/{pointer('application/json', 'schema')}"
        )


def jobs_scenario(api: TestClient, check: Checker) -> None:
    check(api.get("/health"), "/health")
    node = {"id": "n1", "hostname": "h1", "cpu_count": 2, "role": "compute"}
    registered = check(api.post("/nodes/register", json=node), "/nodes/register")
    assert registered["id"] == "n1"
    check(api.post("/nodes/heartbeat", json={"id": "n1"}), "/nodes/heartbeat")
    check(api.get("/schedule"), "/schedule")
    job = check(api.post("/jobs", json={"command": "echo hi", "env_vars": {"A": "1"}}), "/jobs")
    again = {"Idempotency-Key": "k1"}
    check(api.post("/jobs", json={"command": "echo k"}, headers=again), "/jobs")
    check(api.post("/jobs", json={"command": "echo k"}, headers=again), "/jobs")
    job_id = job["job_id"]
    assert check(api.get(f"/jobs/{job_id}/place"), "/jobs/{job_id}/place")["ahead"] == 0
    polled = check(api.get("/jobs", params={"node_id": "n1", "status": "pending"}), "/jobs")
    assert job_id in [j["job_id"] for j in polled]
    template = "/jobs/{job_id}"
    running = {"status": "running", "node_id": "n1"}
    check(api.patch(f"/jobs/{job_id}", json=running), template)
    chunk = {"node_id": "n1", "stream": "stdout", "offset": 0, "data": "hi\n"}
    check(api.post(f"/jobs/{job_id}/output", json=chunk), "/jobs/{job_id}/output")
    late = {**chunk, "offset": 99}
    check(api.post(f"/jobs/{job_id}/output", json=late), "/jobs/{job_id}/output")
    finished = {"status": "done", "exit_code": 0, "stdout": "hi\n", "node_id": "n1"}
    check(api.patch(f"/jobs/{job_id}", json=finished), template)
    check(api.get(f"/jobs/{job_id}"), template)
    check(api.get(f"/jobs/{job_id}", params={"wait": "1", "status_not": "running"}), template)
    check(api.get(f"/jobs/{job_id}/attempts"), "/jobs/{job_id}/attempts")
    assert check(api.get(f"/jobs/{job_id}/place"), "/jobs/{job_id}/place") == {}
    check(api.get(f"/jobs/{job_id}/logs"), "/jobs/{job_id}/logs")
    followed = check.events(api.get(f"/jobs/{job_id}/logs?follow=1"), "/jobs/{job_id}/logs")
    assert [name for name, _ in followed] == ["status", "output", "end"]
    check(api.get("/jobs", params={"limit": "5", "order": "newest"}), "/jobs")
    check(api.get("/jobs", params={"status": "done"}), "/jobs")
    changes = check.events(api.get("/events?after=0&follow=0"), "/events")
    assert {name for name, _ in changes} == {"job"}
    failing = check(api.post("/jobs", json={"command": "false", "max_retries": 0}), "/jobs")
    failed = {"status": "failed", "exit_code": 1, "node_id": "n1"}
    check(api.patch(f"/jobs/{failing['job_id']}", json=running), template)
    check(api.patch(f"/jobs/{failing['job_id']}", json=failed), template)
    check(api.post(f"/jobs/{failing['job_id']}/retry"), "/jobs/{job_id}/retry")
    check(api.post(f"/jobs/{job_id}/retry"), "/jobs/{job_id}/retry")  # 409: done
    retry = {"job_ids": [job_id, "job-999999"]}
    check(api.post("/jobs/retry", json=retry), "/jobs/retry")
    check(api.delete(f"/jobs/{failing['job_id']}"), template)
    batch = {"jobs": [{"command": "a"}, {"command": "b", "priority": "high"}]}
    entries = check(api.post("/jobs/batch", json=batch), "/jobs/batch")["jobs"]
    assert "job_id" in entries[0] and entries[1]["status"] == 400


def schedules_nodes_and_services(api: TestClient, check: Checker) -> None:
    schedule = {"name": "nightly", "cron": "0 3 * * *", "job": {"command": "echo night"}}
    check(api.post("/schedules", json=schedule), "/schedules")
    every = {"name": "often", "every_secs": 60, "paused": True, "job": {"command": "x"}}
    check(api.post("/schedules", json=every), "/schedules")
    check(api.post("/schedules", json=schedule), "/schedules")  # 409: taken
    check(api.get("/schedules"), "/schedules")
    check(api.get("/schedules/nightly"), "/schedules/{name}")
    check(api.post("/schedules/nightly/pause"), "/schedules/{name}/pause")
    check(api.post("/schedules/nightly/resume"), "/schedules/{name}/resume")
    check(api.delete("/schedules/nightly"), "/schedules/{name}")
    check(api.get("/schedules/nightly"), "/schedules/{name}")  # 404
    check(api.get("/jobs", params={"schedule": "often"}), "/jobs")
    check(api.get("/nodes"), "/nodes")
    drained = check(api.post("/nodes/n1/drain"), "/nodes/{node_id}/drain")
    assert drained["drained"] is True
    check(api.get("/nodes", params={"role": "compute"}), "/nodes")
    check(api.post("/nodes/n1/undrain"), "/nodes/{node_id}/undrain")
    check(api.get("/instances", params={"node_id": "n1"}), "/instances")
    service = {"node_id": "n1", "port": 8080, "pid": 42, "deploy_url": "http://x/y.tar"}
    made = check(api.post("/services", json=service), "/services")
    check(api.get("/services"), "/services")
    check(api.get("/services", params={"node_id": "n1"}), "/services")
    check(api.get(f"/services/{made['id']}"), "/services/{service_id}")
    check(api.patch(f"/services/{made['id']}", json={"status": "done"}), "/services/{service_id}")
    check(api.delete(f"/services/{made['id']}"), "/services/{service_id}")
    check(api.get("/metrics"), "/metrics")
    check(api.get("/openapi.json"), "/openapi.json")
    check(api.delete("/nodes/n1"), "/nodes/{node_id}")


def keys_scenario(api: TestClient, check: Checker) -> None:
    made = check(api.post("/keys", json={"name": "ci", "role": "reader"}), "/keys")
    check(api.post("/keys", json={"name": "ci", "role": "admin"}), "/keys")  # 409: taken
    check(api.get("/keys"), "/keys")
    job = check(api.post("/jobs", json={"command": "x", "env_vars": {"T": "s"}}), "/jobs")
    reader = {"Authorization": f"Bearer {made['key']}"}
    shown = check(api.get(f"/jobs/{job['job_id']}", headers=reader), "/jobs/{job_id}")
    assert shown["env_vars"] == {"T": "(hidden)"}
    check(api.delete("/keys/ci"), "/keys/{name}")
    check(api.delete("/keys/ci"), "/keys/{name}")  # 404
    audit = check(api.get("/audit", params={"limit": 2}), "/audit")
    assert [(e["action"], e["name"], e["by"]) for e in audit] == [
        ("key revoke", "ci", "admin"),
        ("key add", "ci", "admin"),
    ]


def quotas_scenario(api: TestClient, check: Checker) -> None:
    quota = {"running": 2, "cpus": 8}
    assert check(api.put("/namespaces/team-a/quota", json=quota), "/namespaces/{namespace}/quota")
    changed = check(
        api.patch("/namespaces/team-a/quota", json={"cpus": 0}), "/namespaces/{namespace}/quota"
    )
    assert changed == {"running": 2}
    listed = check(api.get("/namespaces"), "/namespaces")
    assert [view["name"] for view in listed] == ["default", "team-a"]


def test_errors_and_pages_answer_as_described(
    checked: tuple[TestClient, Checker], make_client: ClientFactory
) -> None:
    api, check = checked
    check(api.post("/jobs", content=b'{"command": 7}'), "/jobs")  # 400, X-Error-Detail
    check(api.get("/jobs/job-404"), "/jobs/{job_id}")  # 404
    check(api.get("/jobs", params={"status": "nope"}), "/jobs")  # 400
    check(api.get("/jobs", headers={"Authorization": "Bearer wrong"}), "/jobs")  # 401
    check(api.post("/nodes/heartbeat", json={"id": "ghost"}), "/nodes/heartbeat")  # 404
    browser = make_client(api_key=KEY)
    check(browser.get("/ui/jobs", follow_redirects=False), "/ui/jobs")  # 303: to the login
    check(browser.get("/ui/login"), "/ui/login")
    check(browser.post("/ui/login", data={"key": "nope"}), "/ui/login")  # 401, the form
    logged_in = browser.post("/ui/login", data={"key": KEY}, follow_redirects=False)
    check(logged_in, "/ui/login")
    for path in ("/ui", "/ui/jobs", "/ui/nodes", "/ui/schedules"):
        check(browser.get(path), path)
    check(browser.get("/ui/jobs/job-404"), "/ui/jobs/{job_id}")  # 404, a page of the UI
    register(api, "n1")
    job_id = api.post("/jobs", json={"command": "sleep 1"}).json()["job_id"]
    job_page = check(browser.get(f"/ui/jobs/{job_id}"), "/ui/jobs/{job_id}")
    token = job_page.split('name="csrf" value="')[1].split('"')[0]
    cancel = browser.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": token}, follow_redirects=False)
    check(cancel, "/ui/jobs/{job_id}/cancel")  # 303, back to the page
    check(browser.post(f"/ui/jobs/{job_id}/cancel", data={}), "/ui/jobs/{job_id}/cancel")  # 403
    check(browser.post("/ui/logout", follow_redirects=False), "/ui/logout")


def test_who_may_call_is_as_described(make_client: ClientFactory) -> None:
    """With a key set and AGENT_AUTH=open, a call without any credential is let in exactly
    where the operation's `security` offers to go without (none, or `{}`): else 401, or the
    UI's way to its login. The poll and an agent's own services are open with their
    parameters only."""
    api = make_client(api_key=KEY)
    register(api, "n1")
    conditional = {
        (entry.route.path_format, name.lower()): entry.methods[name].access
        for entry in TABLE.entries
        for name in entry.methods
    }
    for path, item in described()["paths"].items():
        for method, op in item.items():
            url = re.sub(r"\{\w+\}", "n1", path)
            access = conditional[(path, method)]
            if access in (Access.POLL, Access.OWN_SERVICES):
                url += "?node_id=n1&status=pending"
            json_body = {} if "requestBody" in op else None
            answer = api.request(method, url, json=json_body, follow_redirects=False)
            # Refused: a plain 401 (the login form's own 401 is the form, a page), or to
            # the login form.
            media = answer.headers.get("content-type")
            refused = (answer.status_code, media) == (401, TEXT) or (
                answer.status_code == 303 and answer.headers.get("location") == "/ui/login"
            )
            security = op["security"]
            assert refused == bool(security and {} not in security), (method, path, answer.text)
            if refused and access is Access.UI:
                assert answer.status_code == 303


def test_each_operation_says_the_role_a_named_key_needs() -> None:
    """`x-role` is the table's Method.role for every operation a key may call (none for the
    open ones), so a generated client knows which key a call needs."""
    doc = described()
    for entry in TABLE.entries:
        for name, method in entry.methods.items():
            operation = doc["paths"][entry.route.path_format][name.lower()]
            if method.access is Access.ANYONE:
                assert "x-role" not in operation, (entry.path, name)
                continue
            assert operation["x-role"] == method.role.value, (entry.path, name)
            assert f"the role {method.role.value} or above" in operation["description"]
