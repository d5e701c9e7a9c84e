"""Issue 22, items 6 and 7, tried as an attacker would (docs/SECURITY.md): a node deleted
leaves no trace (every index, MAX_NODES, the metric series, the UI's rows), and an id passes
to a new holder only with the operator's key or the node's own token, without the jobs
queued for the old holder. Over HTTP against the real app on a real Redis; a refused attack
changes nothing."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.store import ops
from scheduler.store.keys import Keys, glob_escape
from tests.conftest import BOTH_FRONTS, ClientFactory, Json, assert_json, assert_text_error

# Each test runs through ASGI and through the hot lane (tests/conftest.py, front).
pytestmark = BOTH_FRONTS

KEY = "operator-key"
JOIN = "join-me"
OPERATOR = {"Authorization": f"Bearer {KEY}"}
SECRET = {"DB_PASSWORD": "hunter2"}
TTL = 1.0  # NODE_TTL_SECS where a node must fall silent within the test


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(api: TestClient, node_id: str, headers: dict[str, str]) -> Any:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    return api.post("/nodes/register", json=body, headers=headers)


def registered(api: TestClient, node_id: str, headers: dict[str, str]) -> str:
    token: str = assert_json(register(api, node_id, headers), 201)["token"]
    return token


def poll(api: TestClient, node_id: str, headers: dict[str, str]) -> Any:
    return api.get(f"/jobs?node_id={node_id}&status=pending", headers=headers)


def submit(api: TestClient, **fields: Any) -> Json:
    job: Json = assert_json(api.post("/jobs", json=fields, headers=OPERATOR), 201)
    return job


def node_traces(rclient: Any, keys: Keys) -> dict[str, Any]:
    """Every index that names a node, and the nodes that have per-node keys, as Redis
    holds them."""
    found = rclient.scan_iter(match=glob_escape(keys.root) + "node:*")
    per_node = sorted({key.decode().removeprefix(keys.root).split(":")[1] for key in found})
    return {
        "nodes": sorted(rclient.hkeys(keys.nodes)),
        "compute": rclient.zrange(keys.nodes_compute, 0, -1),
        "seen": rclient.zrange(keys.nodes_seen, 0, -1),
        "node_tokens": sorted(rclient.hkeys(keys.node_tokens)),
        "tokens": sorted(rclient.hvals(keys.tokens)),
        "per_node_keys": per_node,  # node:<id>:<what>
    }


def metric_nodes(api: TestClient) -> set[str]:
    """The nodes /metrics names (those holding a job or drained)."""
    text = api.get("/metrics", headers=OPERATOR).text
    return set(re.findall(r'^scheduler_node_\w+\{node="([^"]*)"', text, re.MULTILINE))


def metric_node_count(api: TestClient) -> int:
    """The nodes /metrics counts, healthy or not."""
    text = api.get("/metrics", headers=OPERATOR).text
    counts = re.findall(r'^scheduler_nodes\{status="\w+"\} ([0-9.]+)$', text, re.MULTILINE)
    return int(sum(float(count) for count in counts))


def ui_node_rows(api: TestClient) -> list[str]:
    page = api.get("/ui/nodes").text
    table = page.split('<table class="cards" id="nodes">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"/ui/jobs\?node_id=([^\"&]+)\"", table)


@pytest.mark.parametrize("mode", ["open", "token"])
def test_register_delete_cycles_leave_no_trace(
    make_client: ClientFactory, rclient: Any, prefix: str, mode: str
) -> None:
    """Attack 6: 200 register/delete cycles (the join key's, or anyone's in open mode) with
    MAX_NODES=5 leave the indexes, the metric series and the UI's rows as they were, and
    MAX_NODES still admits exactly its count. A job queued on a deleted node is not lost."""
    api = make_client(api_key=KEY, agent_auth=mode, agent_join_key=JOIN, max_nodes=5)
    assert api.post("/ui/login", data={"key": KEY}).status_code in (200, 303)
    keys = Keys(prefix)
    join = bearer(JOIN) if mode == "token" else {}
    for node in ("n1", "n2"):
        registered(api, node, join)
    before = node_traces(rclient, keys)
    assert ui_node_rows(api) == ["n1", "n2"] and metric_node_count(api) == 2

    jobs = []
    for i in range(200):
        token = registered(api, f"evil-{i}", join)
        if i % 10 == 0:  # one in ten cycles has a job queued on the node it deletes
            jobs += [submit(api, command=f"echo {i}", env_vars=SECRET) for _ in range(3)]
        # By the key, or (token mode) by the node's own token, as its agent does on a stop.
        own = mode == "token" and i % 2 == 1
        deleted = api.delete(f"/nodes/evil-{i}", headers=bearer(token) if own else OPERATOR)
        assert deleted.status_code == 204, deleted.text

    # The queues of n1 and n2 now hold the jobs moved off deleted nodes.
    assert node_traces(rclient, keys) == {**before, "per_node_keys": ["n1", "n2"]}
    assert ui_node_rows(api) == ["n1", "n2"]
    assert metric_nodes(api) == {"n1", "n2"} and metric_node_count(api) == 2
    for job in jobs:  # every job is still there, pending on a node that exists
        now = assert_json(api.get(f"/jobs/{job['job_id']}", headers=OPERATOR))
        assert (now["status"], now["node_id"]) in {("pending", "n1"), ("pending", "n2")}
    # MAX_NODES counts the nodes that exist: 3 more fit, the 4th does not.
    for i in range(3):
        registered(api, f"later-{i}", join)
    assert_text_error(register(api, "later-3", join), 503, "too many nodes registered (MAX_NODES)")


def test_a_deleted_nodes_token_stops_working(make_client: ClientFactory) -> None:
    """Deleted by itself (a clean stop) or by the operator, a node's token opens nothing: no
    poll, heartbeat, report, service call or re-register of its id."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN)
    registered(api, "live", bearer(JOIN))
    for deleter in ("itself", "operator"):
        token = registered(api, "gone", bearer(JOIN))
        job = submit(api, command="x", env_vars=SECRET)
        if job["node_id"] != "gone":
            job = submit(api, command="x", env_vars=SECRET)
        headers = bearer(token) if deleter == "itself" else OPERATOR
        assert api.delete("/nodes/gone", headers=headers).status_code == 204
        old = bearer(token)
        assert poll(api, "gone", old).status_code == 401
        beat = api.post("/nodes/heartbeat", json={"id": "gone"}, headers=old)
        assert beat.status_code == 401
        claim = api.patch(f"/jobs/{job['job_id']}", json={"status": "running"}, headers=old)
        assert claim.status_code in (401, 403) and "hunter2" not in claim.text
        service = api.post("/services", json={"node_id": "gone", "port": 1}, headers=old)
        assert service.status_code == 401
        assert register(api, "gone", old).status_code == 401
        assert assert_json(api.get(f"/jobs/{job['job_id']}", headers=OPERATOR))["node_id"] == "live"


def _state(api: TestClient, rclient: Any, keys: Keys) -> Json:
    return {
        "jobs": assert_json(api.get("/jobs", headers=OPERATOR)),
        "nodes": assert_json(api.get("/nodes", headers=OPERATOR)),
        "traces": node_traces(rclient, keys),
    }


@pytest.mark.parametrize("who", ["join key", "stranger", "other node"])
def test_nobody_but_the_key_takes_over_a_silent_node(
    make_client: ClientFactory, rclient: Any, prefix: str, who: str
) -> None:
    """Attack 7: n1 falls silent for NODE_TTL_SECS with a job (env_vars) queued; the join
    key, a stranger and another node's token may not register its id: 401, nothing changes,
    and the job stays n1's, for n1's own token."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN, node_ttl_secs=TTL)
    keys = Keys(prefix)
    n1 = registered(api, "n1", bearer(JOIN))
    n2 = registered(api, "n2", bearer(JOIN))
    queued = submit(api, command="deploy", env_vars=SECRET)
    assert queued["node_id"] == "n1"
    time.sleep(TTL + 0.5)  # n1 (and n2) now silent past NODE_TTL_SECS
    before = _state(api, rclient, keys)

    headers = {"join key": bearer(JOIN), "stranger": {}, "other node": bearer(n2)}[who]
    response = register(api, "n1", headers)

    assert_text_error(response, 401, "unauthorized")
    assert "hunter2" not in response.text
    assert _state(api, rclient, keys) == before
    assert [job["job_id"] for job in assert_json(poll(api, "n1", bearer(n1)))] == ["job-1"]


def test_the_operators_takeover_hands_the_old_holders_jobs_back(
    make_client: ClientFactory,
) -> None:
    """Item 7's rule: the key re-registers an existing id (a new holder: a fresh token, the
    old one revoked), and what was queued for the old holder goes back to placement: its
    pending jobs to the other live nodes, its running ones under the node-loss rule."""
    api = make_client(
        api_key=KEY, agent_auth="token", agent_join_key=JOIN, max_job_retries=1, max_jobs_per_node=5
    )
    old = registered(api, "n1", bearer(JOIN))
    registered(api, "n2", bearer(JOIN))
    on_n1 = [j for j in (submit(api, command="x", env_vars=SECRET) for _ in range(4))]
    pending, running = [j["job_id"] for j in on_n1 if j["node_id"] == "n1"]
    claimed = api.patch(f"/jobs/{running}", json={"status": "running"}, headers=bearer(old))
    assert claimed.status_code == 200

    new = registered(api, "n1", OPERATOR)

    assert new != old and poll(api, "n1", bearer(old)).status_code == 401
    assert assert_json(poll(api, "n1", bearer(new))) == []
    moved = assert_json(api.get(f"/jobs/{pending}", headers=OPERATOR))
    assert (moved["status"], moved["node_id"], moved["env_vars"]) == ("pending", "n2", SECRET)
    lost = assert_json(api.get(f"/jobs/{running}", headers=OPERATOR))
    assert (lost["status"], lost["node_id"], lost["retry_count"]) == ("pending", "n2", 1)
    assert lost["stderr"] == "node lost"
    # Its own token's re-register (an agent restarting) keeps its queue: the same holder.
    job = submit(api, command="y")
    if job["node_id"] != "n1":  # round-robin: the next one is n1's
        job = submit(api, command="y")
    assert registered(api, "n1", bearer(new)) == new
    assert [j["job_id"] for j in assert_json(poll(api, "n1", bearer(new)))] == [job["job_id"]]


def test_with_no_other_live_node_the_takeover_leaves_the_queue(make_client: ClientFactory) -> None:
    """The jobs went to the deployment, not to a host: with no other live node they stay
    queued on the node, as they would go to whichever node came up next."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN)
    registered(api, "n1", bearer(JOIN))
    job = submit(api, command="x")
    new = registered(api, "n1", OPERATOR)
    assert [j["job_id"] for j in assert_json(poll(api, "n1", bearer(new)))] == [job["job_id"]]


def test_open_mode_the_original_agents_restart_keeps_its_queue(
    make_client: ClientFactory,
) -> None:
    """The Rust agent re-registers its own id with no credentials on a restart: in open mode
    it keeps its node and its queue (the same holder, as far as anyone can tell); its role
    stays (README's attack table)."""
    api = make_client(api_key=KEY, agent_auth="open")
    assert register(api, "rust-1", {}).status_code == 201
    assert register(api, "rust-2", {}).status_code == 201
    job = submit(api, command="echo hi")
    assert job["node_id"] == "rust-1"
    restarted = register(api, "rust-1", {})
    assert restarted.status_code == 201 and "token" not in restarted.json()
    assert [j["job_id"] for j in assert_json(poll(api, "rust-1", {}))] == [job["job_id"]]


def on_n1(api: TestClient, **fields: Any) -> Json:
    """A job placed on n1 (the round-robin over n1 and n2 puts every other one there)."""
    job = submit(api, **fields)
    return job if job["node_id"] == "n1" else submit(api, **fields)


def test_the_takeover_moves_waiting_and_delayed_jobs_too(make_client: ClientFactory) -> None:
    """A job waiting for another, or delayed, becomes pending on its node later: bound to n1
    for its old holder, it goes to placement at the takeover as a queued one does."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN, max_jobs_per_node=5)
    for node in ("n1", "n2"):
        registered(api, node, bearer(JOIN))
    first = submit(api, command="sleep 100")
    waiting = on_n1(api, command="x", env_vars=SECRET, after=[first["job_id"]])
    delayed = on_n1(api, command="y", env_vars=SECRET, delay_secs=3600)
    assert (waiting["status"], delayed["status"]) == ("waiting", "delayed")

    registered(api, "n1", OPERATOR)

    for job in (waiting, delayed):
        now = assert_json(api.get(f"/jobs/{job['job_id']}", headers=OPERATOR))
        assert (now["status"], now["node_id"]) == (job["status"], "n2")


def test_a_takeover_past_the_limit_is_refused_and_changes_nothing(
    make_client: ClientFactory, rclient: Any, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More jobs than one script hands back (DELETE_MOVES, 1000; 2 here): 409, nothing
    changed, the old holder's token still the node's."""
    monkeypatch.setattr("scheduler.store.ops.nodes.DELETE_MOVES", 2)
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN)
    old = registered(api, "n1", bearer(JOIN))
    registered(api, "n2", bearer(JOIN))
    for i in range(3):
        on_n1(api, command=f"echo {i}", env_vars=SECRET)
    before = _state(api, rclient, Keys(prefix))

    response = register(api, "n1", OPERATOR)

    assert response.status_code == 409 and "delete it" in response.text
    assert _state(api, rclient, Keys(prefix)) == before
    assert len(assert_json(poll(api, "n1", bearer(old)))) == 1


def test_a_takeover_of_more_work_than_one_pace_is_refused_and_changes_nothing(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    """Issue 36: no call the API accepts holds Redis past about 10 ms. Handing a node's queue
    back is all or nothing, so it is refused (409, nothing changed) past one pace of work
    (endings.SETTLE_UNITS: a job's flat cost and its record's size), here 5 jobs whose heads
    hold the largest node_selector a job may have (16 keys of 16 values of 255 characters:
    66 KB each), well within the limit of 1000 jobs. Draining first moves the queue in
    pieces; then the takeover goes through."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN)
    labels = {f"k{i}": "v" for i in range(16)}
    tokens = {}
    for node in ("n1", "n2"):
        body = {"id": node, "hostname": node, "cpu_count": 2, "labels": labels}
        answer = assert_json(api.post("/nodes/register", json=body, headers=bearer(JOIN)), 201)
        tokens[node] = str(answer["token"])
    selector = {k: ["v", *(chr(97 + j) * 255 for j in range(15))] for k in labels}
    for i in range(5):
        on_n1(api, command=f"echo {i}", node_selector=selector)
    before = _state(api, rclient, Keys(prefix))

    response = register(api, "n1", OPERATOR)

    assert response.status_code == 409 and "drain it" in response.text
    assert _state(api, rclient, Keys(prefix)) == before
    assert len(assert_json(poll(api, "n1", bearer(tokens["n1"])))) == 1
    assert assert_json(api.post("/nodes/n1/drain", headers=OPERATOR))["moved"] >= 4
    assert register(api, "n1", OPERATOR).status_code == 201


def register_as(api: TestClient, node_id: str, hostname: str, headers: dict[str, str]) -> str:
    """Registers `node_id` saying `hostname`; its token ("" when the answer has none)."""
    body = {"id": node_id, "hostname": hostname, "cpu_count": 2, "role": "compute"}
    answer: Json = assert_json(api.post("/nodes/register", json=body, headers=headers), 201)
    return str(answer.get("token", ""))


PINNED = {"node.hostname": "h-n1"}


@pytest.mark.parametrize("mode", ["token", "open"])
@pytest.mark.parametrize("placed", ["at submit", "by the placement pass"])
def test_a_registration_the_operator_did_not_vouch_for_claims_no_hostname(
    make_client: ClientFactory, store: Any, mode: str, placed: str
) -> None:
    """Issue 36, finding 3: `evil` registers with the join key (or, in open mode, with no
    credentials) and `hostname: "h-n1"`; jobs pinned to host h-n1 alternated between n1 and
    evil, their env_vars with them. Only the key's registration makes a hostname a label:
    every pinned job goes to n1, placed as it is submitted or by the placement pass once the
    nodes are there, and evil's poll never sees one. GET /nodes still shows what evil said."""
    api = make_client(api_key=KEY, agent_auth=mode, agent_join_key=JOIN)
    stranger = bearer(JOIN) if mode == "token" else {}
    early = []
    if placed == "by the placement pass":  # no node yet: they wait unplaced
        early = [submit(api, command="x", env_vars=SECRET, node_selector=PINNED) for _ in range(4)]
        assert {job["pending_reason"] for job in early} == {"no_nodes"}
    n1 = register_as(api, "n1", "h-n1", OPERATOR)
    evil = register_as(api, "evil", "h-n1", stranger)
    if placed == "by the placement pass":
        assert sorted(store.run(ops.upkeep.place_unplaced(time.time()))) == sorted(
            j["job_id"] for j in early
        )
        jobs = [assert_json(api.get(f"/jobs/{j['job_id']}", headers=OPERATOR)) for j in early]
    else:
        jobs = [submit(api, command="x", env_vars=SECRET, node_selector=PINNED) for _ in range(4)]

    assert [job["node_id"] for job in jobs] == ["n1"] * 4
    assert assert_json(poll(api, "evil", bearer(evil) if evil else {})) == []
    assert len(assert_json(poll(api, "n1", bearer(n1) if n1 else {}))) == 1  # MAX_JOBS_PER_NODE
    assert assert_json(api.get("/nodes", headers=OPERATOR))["evil"]["hostname"] == "h-n1"
    # Unpinned, evil is a node like any other: the rule takes nothing else from it.
    assert {submit(api, command="y")["node_id"] for _ in range(2)} == {"evil"}


def test_the_operators_word_follows_the_nodes_own_token_not_a_stranger(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    """The key's registration vouches for a node; its agent's restart (its own token) keeps
    that while it says the hostname the key registered: a node's token saying another host's
    name (h-n2) does not take the jobs pinned there, and is no longer vouched for until the
    key registers it again. The join key's never vouches. A hostname label an earlier
    version gave a node not vouched for goes at its next heartbeat."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN)
    keys = Keys(prefix)
    n1 = register_as(api, "n1", "h-n1", OPERATOR)
    evil = register_as(api, "evil", "h-evil", bearer(JOIN))
    assert register_as(api, "n1", "h-n1", bearer(n1)) == n1  # restarted
    assert submit(api, command="x", node_selector={"node.hostname": "h-n1"})["node_id"] == "n1"
    register_as(api, "n2", "h-n2", OPERATOR)
    assert register_as(api, "n1", "h-n2", bearer(n1)) == n1  # claims n2's host
    pinned = [submit(api, command="x", node_selector={"node.hostname": "h-n2"}) for _ in range(3)]
    assert {job["node_id"] for job in pinned} == {"n2"}
    assert not rclient.sismember(keys.nodes_vouched, "n1")
    assert not rclient.sismember(keys.label_nodes("node.hostname=h-n1"), "n1")
    assert register_as(api, "n1", "h-n1", bearer(n1)) == n1  # back: still not vouched
    assert submit(api, command="x", node_selector={"node.hostname": "h-n1"})["node_id"] == ""
    register_as(api, "n1", "h-n1b", OPERATOR)  # renamed by the operator
    assert submit(api, command="x", node_selector={"node.hostname": "h-n1b"})["node_id"] == "n1"
    assert submit(api, command="x", node_selector={"node.hostname": "h-evil"})["node_id"] == ""
    # As an earlier version indexed it: the next heartbeat takes it back.
    rclient.sadd(keys.label_nodes("node.hostname=h-evil"), "evil")
    beat = api.post("/nodes/heartbeat", json={"id": "evil"}, headers=bearer(evil))
    assert beat.status_code == 200
    assert not rclient.exists(keys.label_nodes("node.hostname=h-evil"))
    # Deleted, a node leaves the operator's word behind: its id registered again by the
    # join key (a new node) is not vouched for.
    assert api.delete("/nodes/n1", headers=OPERATOR).status_code == 204
    assert not rclient.sismember(keys.nodes_vouched, "n1")
    register_as(api, "n1", "h-n1b", bearer(JOIN))
    assert submit(api, command="x", node_selector={"node.hostname": "h-n1b"})["node_id"] == ""


def test_open_mode_holds_no_long_poll_for_a_node_never_registered(
    make_client: ClientFactory,
) -> None:
    """Issue 36, finding 7: open mode held a long-poll on any id anyone made up (1,500 of
    them: +46 MB, each a subscription of its own). A never-registered id's long-poll is now
    answered at once, as a poll without `wait`; a registered node's is held as before."""
    api = make_client(api_key=KEY, agent_auth="open")
    register(api, "n1", {})
    with ThreadPoolExecutor(max_workers=2) as pool:
        # Held, it would take 60 s: the test's 30 s would run out first.
        ghost = pool.submit(api.get, "/jobs?node_id=ghost&status=pending&wait=60")
        assert assert_json(ghost.result(timeout=30)) == []
        held = pool.submit(api.get, "/jobs?node_id=n1&status=pending&wait=60")
        job = submit(api, command="x")  # wakes n1's poll (or is found by its first look)
        assert [j["job_id"] for j in assert_json(held.result(timeout=30))] == [job["job_id"]]


def test_open_mode_takes_no_service_nor_series_for_a_node_never_registered(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    """Issue 36, finding 7: POST /services took services for any id (each a record and an
    index of its own). Now 404 naming why, nothing written; a registered node's is taken
    (the Rust agent registers before it starts services, CONTRACT 3.2). Nothing a made-up
    id does (a poll, a long-poll, a service) makes a metric series."""
    api = make_client(api_key=KEY, agent_auth="open")
    keys = Keys(prefix)
    register(api, "n1", {})
    before = (node_traces(rclient, keys), rclient.hgetall(keys.services))
    service = {"node_id": "ghost", "port": 8080, "pid": 42}
    refused = api.post("/services", json=service)
    assert_text_error(refused, 404, "node not registered: register it (POST /nodes/register) first")
    assert poll(api, "ghost", {}).status_code == 200
    assert api.get("/jobs?node_id=ghost&status=pending&wait=1").status_code == 200
    assert (node_traces(rclient, keys), rclient.hgetall(keys.services)) == before
    assert metric_nodes(api) <= {"n1"}
    taken = assert_json(api.post("/services", json={**service, "node_id": "n1"}), 201)
    assert taken["node_id"] == "n1" and taken["status"] == "running"
