"""Token mode decides who may report on a job before Redis reads the job (issue 22, item 5;
docs/SECURITY.md): a refused PATCH /jobs/{id} costs Redis a token lookup and an index
lookup (access.lua job_access), never a read or decode of a record that may hold MiBs of
env_vars and output, and tells no one which job ids exist. Each attack is made over HTTP
against the real app on a real Redis: refused, the same answer for an existing job and a
missing one, Redis never touched the job's record (MONITOR, which shows the commands
scripts run too), and nothing changed."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.api.agents import token_hash
from scheduler.models.job import REPORT_STATUSES, JobUpdate
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.retry import RetryPolicy
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error
from tests.deployment_state import deployment_state

pytestmark = BOTH_FRONTS

KEY = "operator-key"
JOIN = "join-me"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
# About 900 kB of env_vars in 14 000 variables: what made each refused report a full decode.
HUGE_ENV = {f"SECRET_{i:05}": "s" * 50 for i in range(14_000)}
EXISTING, MISSING = "job-1", "job-77"
POLICY = RetryPolicy(1, 0, 60)
REPORTS = [{"status": status, "exit_code": 0, "stdout": "forged"} for status in REPORT_STATUSES]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(api: TestClient, node_id: str) -> str:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    token: str = assert_json(api.post("/nodes/register", json=body, headers=OPERATOR), 201)["token"]
    return token


@pytest.fixture
def deployment(make_client: ClientFactory) -> tuple[TestClient, dict[str, str]]:
    """Token mode with a key and a join key; nodes n1 and n2 (n3 registered, then deleted);
    job-1 on n1 with huge env_vars, claimed by n1. Returns the API and who is who."""
    api = make_client(
        api_key=KEY, agent_auth="token", agent_join_key=JOIN, max_body_bytes=4 * 1024 * 1024
    )
    tokens = {node: register(api, node) for node in ("n1", "n2", "n3")}
    assert api.delete("/nodes/n3", headers=OPERATOR).status_code == 204
    job = {"command": "deploy", "env_vars": HUGE_ENV}
    assert assert_json(api.post("/jobs", json=job, headers=OPERATOR), 201)["node_id"] == "n1"
    claim = {"status": "running", "node_id": "n1"}
    assert api.patch("/jobs/job-1", json=claim, headers=bearer(tokens["n1"])).status_code == 200
    return api, tokens


# Those without a valid node token (401), and a valid token of another node (404: as a
# missing job, so a node learns nothing of other nodes' jobs either).
STRANGERS = {
    "no token": lambda tokens: {},
    "a garbage token": lambda tokens: bearer("not-a-token"),
    "the join key": lambda tokens: bearer(JOIN),
    "a deleted node's token": lambda tokens: bearer(tokens["n3"]),
}
OTHER_NODE = {"another node's token": lambda tokens: bearer(tokens["n2"])}


def answer(response: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Everything a caller sees of an answer but its date."""
    headers = sorted((k, v) for k, v in response.headers.items() if k != "date")
    return response.status_code, response.content, headers


def stored(client: redis.Redis, keys: Keys) -> dict[bytes, Any]:
    """Every key of the deployment with its value (DUMP): what an attack could change (but
    the request metrics, which every request adds to)."""
    return deployment_state(client, keys.prefix)


@contextlib.contextmanager
def commands(client: redis.Redis) -> Iterator[list[str]]:
    """Every command Redis runs meanwhile, those of scripts included (MONITOR), as text."""
    seen: list[str] = []
    with client.monitor() as monitor:
        yield seen
        marker = f"end-{uuid.uuid4().hex}"
        client.echo(marker)
        while marker not in (command := str(monitor.next_command()["command"])):
            seen.append(command)


@pytest.mark.parametrize("who", [*STRANGERS, *OTHER_NODE])
def test_a_refused_report_is_the_same_for_an_existing_and_a_missing_job(
    deployment: tuple[TestClient, dict[str, str]],
    who: str,
    rclient: redis.Redis,
    prefix: str,
) -> None:
    api, tokens = deployment
    headers = {**STRANGERS, **OTHER_NODE}[who](tokens)
    keys = Keys(prefix)
    before = stored(rclient, keys)
    with commands(rclient) as seen:
        answers = [
            [api.patch(f"/jobs/{job_id}", json=report, headers=headers) for report in REPORTS]
            for job_id in (EXISTING, MISSING)
        ]
    # The job's record was never read for it: no GET, no script reading it.
    assert not [c for c in seen if keys.job(EXISTING) in c]
    for report, existing, missing in zip(REPORTS, *answers, strict=True):
        assert answer(existing) == answer(missing), report
        if who in STRANGERS:
            assert_text_error(existing, 401, "unauthorized")
        else:
            assert_text_error(existing, 404, "job not found")
    assert stored(rclient, keys) == before


def test_the_token_check_reads_no_record_even_in_the_state_machine(
    deployment: tuple[TestClient, dict[str, str]], rclient: redis.Redis, prefix: str
) -> None:
    """TRANSITION, which the API runs once CHECK_REPORT has let a report through, checks
    again the same way: called directly (as a caller skipping the precheck would be), it too
    refuses without reading the record, the same for an existing and a missing job."""
    _, tokens = deployment
    keys = Keys(prefix)
    callers = {"a garbage token": "0" * 64, "another node's token": token_hash(tokens["n2"])}
    before = stored(rclient, keys)
    for caller in callers.values():
        replies = []
        with commands(rclient) as seen:
            for job_id in (EXISTING, MISSING):
                for status in REPORT_STATUSES:
                    update = JobUpdate(status=status)
                    call = job_scripts.transition(job_id, update, 1.0, POLICY, caller, node_ttl=30)
                    replies.append(rclient.eval(call.script.text, 1, keys.root, *call.args))
        assert not [c for c in seen if keys.job(EXISTING) in c]
        assert len({repr(reply) for reply in replies}) == 1, replies
    assert stored(rclient, keys) == before


def test_the_node_and_the_key_keep_their_answers(
    deployment: tuple[TestClient, dict[str, str]], rclient: redis.Redis, prefix: str
) -> None:
    """The job's own node reports as before (and Redis does read the record then: the
    observation above would have seen it); the key holder still learns a job is missing."""
    api, tokens = deployment
    own = bearer(tokens["n1"])
    for headers in (own, OPERATOR):
        assert_text_error(
            api.patch(f"/jobs/{MISSING}", json={"status": "running"}, headers=headers),
            404,
            "job not found",
        )
    with commands(rclient) as seen:
        done = {"status": "done", "exit_code": 0, "stdout": "ok", "node_id": "n1"}
        assert assert_json(api.patch("/jobs/job-1", json=done, headers=own))["status"] == "done"
    assert [c for c in seen if Keys(prefix).job(EXISTING) in c]
    # A repeat whose answer was lost, by the key: today's answer (the job as stored).
    repeat = api.patch("/jobs/job-1", json={"status": "done", "exit_code": 0}, headers=OPERATOR)
    assert assert_json(repeat)["stdout"] == "ok"


def test_open_mode_keeps_the_originals_answers(make_client: ClientFactory) -> None:
    """AGENT_AUTH=open (the Rust agent): anyone reports, and a missing job is 404."""
    api = make_client(api_key=KEY, agent_auth="open")
    api.post("/nodes/register", json={"id": "n1", "hostname": "n1", "role": "compute"})
    api.post("/jobs", json={"command": "x", "env_vars": HUGE_ENV}, headers=OPERATOR)
    assert_text_error(
        api.patch(f"/jobs/{MISSING}", json={"status": "running"}), 404, "job not found"
    )
    assert assert_json(api.patch("/jobs/job-1", json={"status": "running"}))["status"] == "running"
    done = {"status": "done", "exit_code": 0, "stdout": "x" * 100_000}  # checked before read
    assert assert_json(api.patch("/jobs/job-1", json=done))["status"] == "done"
    big = {"status": "done", "exit_code": 0, "stdout": "x" * 100_000}
    assert_text_error(api.patch(f"/jobs/{MISSING}", json=big), 404, "job not found")
