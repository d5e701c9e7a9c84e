"""Issue 24, item 4, tried as an attacker would (docs/SECURITY.md): a stranger cannot drain
or undrain a node, a node's token drains its own node only (as stopping) and never lifts the
operator's drain, a cross-site page cannot drain through the browser, and unknown ids cannot
grow the drained hash. The nodes page's buttons need the UI's CSRF token. Over HTTP against
the real app on a real Redis; a refused attack changes nothing."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler.store.keys import Keys
from tests.conftest import BOTH_FRONTS, ClientFactory, assert_json, assert_text_error

pytestmark = BOTH_FRONTS

KEY = "operator-key"
JOIN = "join-me"
OPERATOR = {"Authorization": f"Bearer {KEY}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def registered(api: TestClient, node_id: str, headers: dict[str, str]) -> str:
    body = {"id": node_id, "hostname": node_id, "cpu_count": 2, "role": "compute"}
    token: str = assert_json(api.post("/nodes/register", json=body, headers=headers), 201).get(
        "token", ""
    )
    return token


def drain_state(rclient: Any, prefix: str) -> dict[str, Any]:
    keys = Keys(prefix)
    return {
        "drained": rclient.hgetall(keys.drained_nodes),
        "changes": rclient.hgetall(keys.drained_changes),
        "n1 queue": rclient.zrange(keys.node_status("n1", "pending"), 0, -1),
        "n2 queue": rclient.zrange(keys.node_status("n2", "pending"), 0, -1),
    }


@pytest.fixture
def nodes(make_client: ClientFactory) -> tuple[TestClient, str, str]:
    """Token mode with a key: nodes n1 and n2 (their tokens), two jobs queued on each. Every
    stranger's call here is a wrong credential, counted: the limit past which they are 429
    is test_security_guesses.py's, not this file's."""
    api = make_client(api_key=KEY, agent_auth="token", agent_join_key=JOIN, auth_failures_max=1000)
    one, two = registered(api, "n1", bearer(JOIN)), registered(api, "n2", bearer(JOIN))
    for _ in range(4):
        assert api.post("/jobs", json={"command": "x"}, headers=OPERATOR).status_code == 201
    return api, one, two


def test_a_stranger_cannot_drain_or_undrain(
    nodes: tuple[TestClient, str, str], rclient: Any, prefix: str
) -> None:
    api, _, _ = nodes
    assert_json(api.post("/nodes/n2/drain", headers=OPERATOR))  # something to undrain
    before = drain_state(rclient, prefix)
    for credentials in ({}, bearer("garbage"), bearer(JOIN)):
        for action in ("drain", "undrain"):
            for node in ("n1", "n2", "ghost"):
                path = f"/nodes/{node}/{action}"
                answer = api.post(path, json={"by": "stopping"}, headers=credentials)
                assert_text_error(answer, 401, "unauthorized")
    assert drain_state(rclient, prefix) == before


def test_a_nodes_token_drains_its_own_node_only_as_stopping(
    nodes: tuple[TestClient, str, str], rclient: Any, prefix: str
) -> None:
    api, one, two = nodes
    before = drain_state(rclient, prefix)
    # Another node's, or an unknown one: 403 whether it exists or not, and nothing written.
    for target in ("n2", "ghost"):
        refused = api.post(f"/nodes/{target}/drain", json={"by": "stopping"}, headers=bearer(one))
        assert_text_error(refused, 403, "forbidden: the node token is for another node")
    # Its own, but as the operator: refused.
    as_operator = api.post("/nodes/n1/drain", headers=bearer(one))
    assert_text_error(
        as_operator, 403, "forbidden: a node's token drains its own node as stopping only"
    )
    assert drain_state(rclient, prefix) == before

    own = assert_json(api.post("/nodes/n1/drain", json={"by": "stopping"}, headers=bearer(one)))
    assert (own["drained_by"], own["moved"]) == ("stopping", 2)
    # n2's token cannot lift n1's drain; n1's own token can.
    assert_text_error(
        api.post("/nodes/n1/undrain", headers=bearer(two)),
        403,
        "forbidden: the node token is for another node",
    )
    assert assert_json(api.post("/nodes/n1/undrain", headers=bearer(one)))["undrained"] is True


def test_a_nodes_token_never_lifts_the_operators_drain(
    nodes: tuple[TestClient, str, str], rclient: Any, prefix: str
) -> None:
    api, one, _ = nodes
    assert_json(api.post("/nodes/n1/drain", headers=OPERATOR))
    # Its agent stopping asks again: the operator's drain stays the operator's.
    again = assert_json(api.post("/nodes/n1/drain", json={"by": "stopping"}, headers=bearer(one)))
    assert again["drained_by"] == "operator"
    before = drain_state(rclient, prefix)
    assert_text_error(
        api.post("/nodes/n1/undrain", headers=bearer(one)),
        403,
        "forbidden: the operator drained this node; only the key undrains it",
    )
    # Nor does its re-registration with its own token.
    assert registered(api, "n1", bearer(one)) == one
    assert drain_state(rclient, prefix) == before
    assert assert_json(api.post("/nodes/n1/undrain", headers=OPERATOR))["undrained"] is True


# What a page elsewhere can make a browser send, and the boundary's answer.
CROSS_SITE = [
    ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403),
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({"Sec-Fetch-Site": "cross-site"}, 403),
    ({"Origin": "http://evil.example"}, 403),
    ({"Origin": "null", "Content-Type": "application/json"}, 403),
]


@pytest.mark.parametrize("keyed", [True, False], ids=["key", "no key"])
def test_a_cross_site_page_cannot_drain(
    make_client: ClientFactory, rclient: Any, prefix: str, keyed: bool
) -> None:
    """A page elsewhere sends simple POSTs (with the operator's key or not: the API may
    have none): the browser boundary refuses them before the handler."""
    api = make_client(api_key=KEY if keyed else "")
    registered(api, "n1", OPERATOR)
    assert_json(api.post("/nodes/n1/drain", headers=OPERATOR))
    before = drain_state(rclient, prefix)
    for headers, status in CROSS_SITE:
        for action in ("drain", "undrain"):
            sent = {**headers, **(OPERATOR if keyed else {})}
            answer = api.post(f"/nodes/n1/{action}", content=b'{"by":"operator"}', headers=sent)
            assert answer.status_code == status, (headers, answer.text)
    assert drain_state(rclient, prefix) == before


def test_unknown_ids_cannot_grow_the_drained_hash(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    api = make_client(api_key=KEY)
    registered(api, "n1", OPERATOR)
    for _ in range(50):
        node = "x" + secrets.token_hex(8)
        for action in ("drain", "undrain"):
            answer = api.post(f"/nodes/{node}/{action}", headers=OPERATOR)
            assert_text_error(answer, 404, "node not found")
    too_long = "n" * 129
    assert api.post(f"/nodes/{too_long}/drain", headers=OPERATOR).status_code == 404
    keys = Keys(prefix)
    assert rclient.exists(keys.drained_nodes, keys.drained_changes) == 0


def _page_token(api: TestClient) -> str:
    page = api.get("/ui/nodes").text
    return page.split('name="csrf" value="')[1].split('"')[0]


def test_the_nodes_page_buttons_need_the_token(
    make_client: ClientFactory, rclient: Any, prefix: str
) -> None:
    api = make_client(api_key=KEY)
    assert api.post("/ui/login", data={"key": KEY}).status_code in (200, 303)
    registered(api, "n1", OPERATOR)
    registered(api, "n2", OPERATOR)
    page = api.get("/ui/nodes").text
    assert 'id="drain-n1"' in page and 'action="/ui/nodes/n1/drain"' in page
    before = drain_state(rclient, prefix)
    for forged in ({}, {"csrf": "x"}, {"csrf": ""}):
        assert api.post("/ui/nodes/n1/drain", data=forged).status_code == 403
    token = _page_token(api)
    elsewhere = {"Origin": "http://evil.example"}
    refused = api.post("/ui/nodes/n1/drain", data={"csrf": token}, headers=elsewhere)
    assert refused.status_code == 403
    for bad in ("/ui/nodes/n1/delete", "/ui/nodes/ghost/drain"):
        assert api.post(bad, data={"csrf": token}).status_code == 404
    assert drain_state(rclient, prefix) == before

    done = api.post("/ui/nodes/n1/drain", data={"csrf": token}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/ui/nodes")
    row = api.get("/ui/nodes").text.split('<tr id="node-n1">')[1].split("</tr>")[0]
    assert "drained</span> by operator" in row and 'id="undrain-n1"' in row
    undone = api.post("/ui/nodes/n1/undrain", data={"csrf": token}, follow_redirects=False)
    assert undone.status_code == 303
    assert rclient.hgetall(Keys(prefix).drained_nodes) == {}
