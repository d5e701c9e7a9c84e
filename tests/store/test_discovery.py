"""Where Redis is (connection/discovery.py), as steps that both kinds of client carry out:
table tests of the steps against scripted answers, no network."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.config.redis_url import ClusterRedis, SentinelRedis
from scheduler.store.connection.discovery import Ask, Locating, check_role, moved_to, tag_slot

SENTINELS = SentinelRedis(
    sentinels=(("s1", 26379), ("s2", 26379), ("s3", 26379)),
    service="svc",
    username="user",
    password="data-pw",
    sentinel_password="sentinel-pw",
)
CLUSTER = ClusterRedis(seeds=(("c1", 7000), ("c2", 7001)), username="u", password="pw")


def carry_out(locating: Locating, answers: dict[str, Any]) -> list[Ask]:
    """Each step answered from `answers` by host: a value, or an exception raised."""
    asked = []
    while (ask := locating.ask) is not None:
        asked.append(ask)
        answer = answers[ask.host]
        if isinstance(answer, BaseException):
            locating.fail(answer)
        else:
            locating.answer(answer)
    return asked


@pytest.mark.parametrize(
    ("answers", "address", "hosts"),
    [
        ({"s1": [b"10.0.0.1", b"6380"]}, ("10.0.0.1", 6380), ["s1"]),
        (
            {"s1": RedisConnectionError("refused"), "s2": None, "s3": [b"p", b"6379"]},
            ("p", 6379),
            ["s1", "s2", "s3"],
        ),
        ({"s1": TimeoutError(), "s2": ResponseError("NOAUTH"), "s3": ["p", "1"]}, ("p", 1), None),
    ],
)
def test_the_sentinels_are_asked_in_turn_until_one_names_the_primary(
    answers: dict[str, Any], address: tuple[str, int], hosts: list[str] | None
) -> None:
    locating = Locating(SENTINELS, "sched")
    asked = carry_out(locating, answers)
    assert locating.address == address
    if hosts is not None:
        assert [a.host for a in asked] == hosts
    # The sentinels' own password, not the data nodes' (and no user: sentinels have none).
    assert {(a.username, a.password) for a in asked} == {(None, "sentinel-pw")}
    assert asked[0].command == ("SENTINEL", "get-master-addr-by-name", "svc")


def test_no_sentinel_naming_a_primary_is_a_connection_error_naming_each() -> None:
    locating = Locating(SENTINELS, "sched")
    answers = {"s1": RedisConnectionError("refused"), "s2": None, "s3": TimeoutError("slow")}
    with pytest.raises(RedisConnectionError, match=r"s1:26379: refused; s2:.*no primary"):
        carry_out(locating, answers)


def slots(owner: str, port: int, covering: int) -> list[Any]:
    return [[0, covering - 1, [b"other", 1]], [covering, 16383, [owner.encode(), port]]]


def test_the_cluster_seed_names_the_owner_of_the_tags_slot() -> None:
    slot = tag_slot("sched")
    locating = Locating(CLUSTER, "sched")
    asked = carry_out(locating, {"c1": slots("n3", 7005, slot)})
    assert locating.address == ("n3", 7005)
    assert asked == [Ask("c1", 7000, "u", "pw", ("CLUSTER", "SLOTS"))]


def test_an_unknown_endpoint_means_the_seed_it_was_asked_of() -> None:
    locating = Locating(CLUSTER, "sched")
    answers = {"c1": RedisConnectionError("down"), "c2": slots("?", 7009, tag_slot("sched"))}
    carry_out(locating, answers)
    assert locating.address == ("c2", 7009)


def test_a_slot_no_seed_serves_is_a_connection_error() -> None:
    locating = Locating(CLUSTER, "sched")
    with pytest.raises(RedisConnectionError, match=r"slot \d+ is not served"):
        carry_out(locating, {"c1": [], "c2": []})


def test_no_step_waits_once_located() -> None:
    locating = Locating(SENTINELS, "sched")
    carry_out(locating, {"s1": [b"p", b"1"]})
    with pytest.raises(RuntimeError):
        locating.answer([b"q", b"2"])
    assert locating.address == ("p", 1)


@pytest.mark.parametrize(("role", "primary"), [([b"master", 0, []], True), ([b"slave"], False)])
def test_only_a_node_whose_role_is_primary_will_do(role: list[Any], primary: bool) -> None:
    if primary:
        check_role(role, "h", 1)
    else:
        with pytest.raises(RedisConnectionError, match="h:1 is a slave, not the primary"):
            check_role(role, "h", 1)


@pytest.mark.parametrize(
    ("message", "found"),
    [
        ("MOVED 14604 127.0.0.1:34029", ("127.0.0.1", 34029)),
        ("MOVED 1 ::1:7000", ("::1", 7000)),
        ("MOVED 1 :7000", None),  # "the address you reached me on": the seeds are asked
        ("MOVED 1 ?:7000", None),
        ("ASK 1 127.0.0.1:7000", None),
        ("CLUSTERDOWN The cluster is down", None),
        ("MOVED 1 host:port", None),
    ],
)
def test_where_a_moved_error_says_the_slot_is(message: str, found: tuple[str, int] | None) -> None:
    assert moved_to(message) == found
