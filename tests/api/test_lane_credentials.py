"""Every credential case on every route the hot lane takes, in both AGENT_AUTH modes: the lane
and ASGI answer it byte for byte alike (status, body, headers with Retry-After), and count the
same wrong credentials in Redis (api/guesses.py; docs/SECURITY.md). The harness is
test_lane_hostile.py's: each request goes to a lane server and an ASGI server with the same
settings, each on a key prefix of its own."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from scheduler.config import Settings
from scheduler.store.keys import Keys
from tests.api.test_lane_hostile import JOB, RUNNING, Front, converse, two_servers

KEY = "lane-credentials-key"
JOIN = "lane-credentials-join-key"
LIMIT = 4  # wrong credentials an address may send before 429
RETRY_AFTER = re.compile(rb"retry-after: (\d+)\r\n")

# The routes the lane takes: (request line, body). The ASGI server answers the same bytes.
ROUTES = {
    "read": ("GET /jobs/job-1 HTTP/1.1", b""),
    "poll": ("GET /jobs?node_id=n1&status=pending HTTP/1.1", b""),
    "submit": ("POST /jobs HTTP/1.1", JOB),
    "report": ("PATCH /jobs/job-2 HTTP/1.1", RUNNING),
}
# Authorization headers, as raw header lines ("{key}", "{token}" and "{join}" filled in per
# front: each front's node n1 has a token of its own).
CASES: dict[str, list[bytes]] = {
    "none": [],
    "key": [b"Authorization: Bearer {key}"],
    "node-token": [b"Authorization: Bearer {token}"],
    "join-key": [b"Authorization: Bearer {join}"],
    "wrong": [b"Authorization: Bearer wrong"],
    "empty-bearer": [b"Authorization: Bearer "],
    "bearer-no-space": [b"Authorization: Bearer"],
    "bearer-no-space-key": [b"Authorization: Bearer{key}"],
    "empty-value": [b"Authorization:"],
    "lowercase-scheme": [b"Authorization: bearer {key}"],
    "basic": [b"Authorization: Basic {key}"],
    "two-spaces": [b"Authorization: Bearer  {key}"],
    "wrong-then-key": [b"Authorization: Bearer wrong", b"Authorization: Bearer {key}"],
    "key-then-wrong": [b"Authorization: Bearer {key}", b"Authorization: Bearer wrong"],
    "wrong-then-token": [b"Authorization: Bearer wrong", b"Authorization: Bearer {token}"],
    "key-trailing-space": [b"Authorization: Bearer {key} \t"],
    "key-trailing-cr": [b"Authorization: Bearer {key}\r"],
    "key-leading-space": [b"Authorization:    Bearer {key}"],
    "key-folded": [b"Authorization: Bearer\r\n {key}"],
    "latin-1": [b"Authorization: Bearer \xe9\xff\xa0"],
    "utf-8": ["Authorization: Bearer clé-日本".encode()],
    "nul": [b"Authorization: Bearer \x00{key}"],
    "token-as-key-prefix": [b"Authorization: Bearer {key}{token}"],
    "1-mb": [b"Authorization: Bearer " + b"a" * 1_000_000],
}


def filled(line: str, headers: list[bytes], body: bytes, secrets: dict[str, str]) -> bytes:
    lines = [line.encode(), b"Host: t"]
    for header in headers:
        for name, value in secrets.items():
            header = header.replace(b"{" + name.encode() + b"}", value.encode())
        lines.append(header)
    if body:
        lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@contextlib.contextmanager
def keyed(
    redis_url: str, data: Path, mode: str, limit: int
) -> Iterator[list[tuple[Front, dict[str, str], str]]]:
    """The key and the join key set, `mode`; node n1 registered (its token kept), job-1
    pending and job-2 running on it, through the lane and through ASGI: [(front, its
    secrets, its prefix)]."""
    base = Settings.from_env(
        {},
        redis_url=redis_url,
        redis_prefix=f"t{uuid.uuid4().hex[:12]}",
        scheduler_db=str(data / "scheduler.db"),
        api_key=KEY,
        agent_join_key=JOIN,
        agent_auth=mode,
        auth_failures_max=limit,
        allowed_hosts="t",
    )
    with two_servers(base) as pair:
        made = []
        for front, protocol in zip(pair, ("LaneProtocol", "OneWriteProtocol"), strict=True):
            url, auth = f"http://127.0.0.1:{front.port}", {"Authorization": f"Bearer {KEY}"}
            node = httpx.post(f"{url}/nodes/register", json={"id": "n1"}, headers=auth)
            token = node.json()["token"]
            for _ in range(2):
                made_job = httpx.post(f"{url}/jobs", json={"command": "x"}, headers=auth)
                assert made_job.status_code == 201
            claim = httpx.patch(f"{url}/jobs/job-2", content=RUNNING, headers=auth)
            assert claim.status_code == 200, claim.text
            secrets = {"key": KEY, "token": token, "join": JOIN}
            made.append((front, secrets, f"{base.redis_prefix}-{protocol}"))
        yield made


def counted(rclient: redis.Redis, prefix: str) -> int:
    return int(rclient.get(Keys(prefix).auth_failures("127.0.0.1")) or 0)


def reset(rclient: redis.Redis, fronts: list[tuple[Front, dict[str, str], str]]) -> None:
    """A clean slate: no count in Redis, no bar in either process."""
    for front, _, prefix in fronts:
        rclient.delete(Keys(prefix).auth_failures("127.0.0.1"))
        front.app.state.credentials.barred_until.clear()


@pytest.fixture(scope="module", params=["open", "token"])
def matrix_fronts(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[Front, dict[str, str], str]]]:
    data = Path(tmp_path_factory.mktemp("credentials"))
    with keyed(redis_url, data, request.param, 1_000_000) as fronts:
        yield fronts


def exchange(
    rclient: redis.Redis,
    fronts: list[tuple[Front, dict[str, str], str]],
    route: str,
    case: str,
) -> list[tuple[list[bytes], int, int]]:
    """Each front's (answers, wrong credentials counted, requests its lane served)."""
    line, body = ROUTES[route]
    results = []
    for front, secrets, prefix in fronts:
        before, served = counted(rclient, prefix), front.served
        answers = converse(front.port, [filled(line, CASES[case], body, secrets)], timeout=5)
        answers = [a.replace(secrets["token"].encode(), b"<token>") for a in answers]
        results.append((answers, counted(rclient, prefix) - before, front.served - served))
    return results


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_credential_is_answered_and_counted_alike_on_both_fronts(
    matrix_fronts: list[tuple[Front, dict[str, str], str]],
    rclient: redis.Redis,
    route: str,
    case: str,
) -> None:
    reset(rclient, matrix_fronts)
    (lane, lane_count, by_lane), (asgi, asgi_count, _) = exchange(
        rclient, matrix_fronts, route, case
    )
    assert lane == asgi
    assert lane_count == asgi_count
    # The lane took it (the parser refuses a CR, a NUL or a folded line before either front).
    assert by_lane == (0 if lane[0].startswith(b"HTTP/1.1 400 Bad Request") else 1)


def same_retry_after(answers: list[list[bytes]]) -> list[list[bytes]]:
    """The answers with Retry-After's seconds replaced, once checked within the window and
    within a second of each other (each front's window started a moment apart)."""
    seconds = [int(s) for a in answers for s in RETRY_AFTER.findall(a[0])]
    assert (
        all(1 <= s <= 300 for s in seconds)
        and max(seconds, default=0) - min(seconds, default=0) <= 1
    )
    return [[RETRY_AFTER.sub(b"retry-after: <s>\r\n", x) for x in a] for a in answers]


@pytest.mark.parametrize("mode", ["open", "token"])
def test_past_the_limit_both_fronts_answer_429_alike_and_serve_the_right_ones(
    redis_url: str, rclient: redis.Redis, tmp_path: Path, mode: str
) -> None:
    with keyed(redis_url, tmp_path, mode, LIMIT) as fronts:
        compared = [r for r in ROUTES if mode == "token" or r in ("read", "submit")]
        for route in compared:
            reset(rclient, fronts)
            for n in range(LIMIT + 2):
                (lane, lane_count, _), (asgi, asgi_count, _) = exchange(
                    rclient, fronts, route, "wrong"
                )
                through_lane, through_asgi = same_retry_after([lane, asgi])
                assert through_lane == through_asgi
                status = b"429" if n >= LIMIT else b"401"
                assert lane[0].startswith(b"HTTP/1.1 " + status), (route, n, lane[0][:40])
                assert lane_count == asgi_count == (1 if n <= LIMIT else 0)
            # Barred: the right ones are served all the same, through either front.
            right = "node-token" if mode == "token" and route in ("poll", "report") else "key"
            (lane, _, by_lane), (asgi, _, _) = exchange(rclient, fronts, route, right)
            assert lane == asgi and by_lane == 1
            assert lane[0].split(b" ")[1] in (b"200", b"201", b"409")
