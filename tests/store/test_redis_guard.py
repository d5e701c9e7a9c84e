"""scheduler/store/connection/blocking.py builds on redis-py's connections beyond what redis-py
documents (it overrides read_response, connect and on_connect_check_health, and copies the
shape of AbstractConnection.connect), and discovery.py uses redis.crc.key_slot. pyproject.toml
caps redis-py to the minor version this was written against; this test fails when the
installed redis-py differs in anything they rely on, naming the member and what to re-check.

How complete: GUARDED holds every redis-py member blocking.py's classes override, call, read
or set (tests/guards.py says how each is digested), kept complete by an AST scan: every
`self.X` and `super().X` in those classes, and every method they define, that names a member
a redis-py class in their MRO owns must be listed. What it cannot see: members reached
through another object (the pool's `disconnect`, listed by hand), and behaviour outside these
members; tests/store/test_topology.py, test_cluster_connections.py and test_failover.py run
the clients against real Sentinel and Cluster deployments.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import redis
import redis.crc
from redis.connection import AbstractConnection, Connection, ConnectionPool

from scheduler.store.connection import blocking
from tests.guards import member_digest, owned, sha256

# Our classes and the redis-py class each stands on.
OURS: dict[str, type] = {
    "_DropOnTopologyError": AbstractConnection,
    "_LocatedConnection": Connection,
    "LocatedPool": ConnectionPool,
}
CLASSES = {cls.__name__: cls for cls in (AbstractConnection, Connection, ConnectionPool)}

# member -> (sha256 as in redis-py 8.1.0, what to re-check when it changes)
GUARDED: dict[str, tuple[str, str]] = {
    "AbstractConnection._host_error": (
        "208bbec429584d9abd88b5a1ab739d353bf9325a64243dfd398af250221f0828",
        "_DropOnTopologyError.read_response (the address in NotPrimary's message)",
    ),
    "AbstractConnection._sock": (
        "06d20a79e5e5ac6714dbd41ae37580156fc04e00d42b123170fa487558d4c0ff",
        "_LocatedConnection._connect_to_owner (connected already: nothing to do)",
    ),
    "AbstractConnection.connect": (
        "3efda598d10dfdebbea8c0304c63345b1c796f9dc200688f20a18e6365c29405",
        "_LocatedConnection.connect, written after it (locate, then connect, under retry)",
    ),
    "AbstractConnection.connect_check_health": (
        "6d69f8fe38a17d5c0bb6b0d448f342ba94a148908183bb30ed61dfe163be0be2",
        "_LocatedConnection._connect_to_owner's call, and that it runs on_connect_check_health",
    ),
    "AbstractConnection.disconnect": (
        "70a8b4f7cf62b587c018d9b7cd58f4644cf54d01b9cc600cd1bd3eb593429786",
        "_DropOnTopologyError.read_response and _LocatedConnection._failed",
    ),
    "AbstractConnection.on_connect_check_health": (
        "fb8e8114ccbf0d2a55640fddad74c0ff50b4063d96ab4d3646669ca687bcbc39",
        "_LocatedConnection's override: the ROLE check after AUTH and SELECT",
    ),
    "AbstractConnection.read_response": (
        "695c899843302e31376f8ff31be4a2118a01ce14cb5206ab608c3d3e7269d82b",
        "_DropOnTopologyError.read_response (the topology replies it turns into NotPrimary)",
    ),
    "AbstractConnection.retry": (
        "716c63e4b6893987f627c752987a51b7a692ffa29975cd6e385e2e238324a9ce",
        "_LocatedConnection.connect (call_with_retry)",
    ),
    "AbstractConnection.send_command": (
        "e294400d291819cc25be3e6e3d017e31072af002289c36813ba4b2b0fc438e59",
        "_LocatedConnection.on_connect_check_health (ROLE)",
    ),
    "Connection.__init__": (
        "9a00073b9b9bca27b1f1b0e509ec11b29662d94a318a3fc7219db704ed00231b",
        "_LocatedConnection.__init__ (the pool's connection_kwargs, `locator` taken out)",
    ),
    "Connection.host": (
        "33be04ee1c9ad40e456d7f7027ef1347417b7bb5b9700683a0f10ac81e589505",
        "_LocatedConnection._connect_to_owner (set before each connect)",
    ),
    "Connection.port": (
        "e627ad406a7ea253e03967faaf0e30cc1b0bf921ed613b3c708766704dba9a0b",
        "_LocatedConnection._connect_to_owner (set before each connect)",
    ),
    "ConnectionPool.__init__": (
        "952ffea85b40c89e7a30ebcd90a659b2cdaced4186aa83326b46c4d4d84b5131",
        "LocatedPool.__init__ (connection_class, db, and kwargs for every connection)",
    ),
    "ConnectionPool.connection_kwargs": (
        "cfd891ce430053a88f0f8692a6f38e9d862a8b826d13d17ded72a6fc0c2c6103",
        "LocatedPool.__init__ (locator, username, password for every connection)",
    ),
    "ConnectionPool.disconnect": (
        "5ff3770a1d79ffdbd34f2344a5e7455c60e530fafab4c0df6d80a4480235c40b",
        "_Locator.owner (idle connections to a former primary dropped)",
    ),
    "crc.key_slot": (
        "402cb9c64c6aed98f6a20ec85c8d66eb37e2482ab8c5b29a056169efe2045e2f",
        "discovery.tag_slot (the deployment's cluster slot)",
    ),
}


def digest(member: str) -> str:
    owner, _, name = member.partition(".")
    if owner == "crc":
        return sha256(inspect.getsource(getattr(redis.crc, name)))
    return member_digest(CLASSES[owner], name)


def redis_owner(base: type, name: str) -> type | None:
    """The redis-py class in `base`'s MRO that owns `name`, if any."""
    for cls in base.__mro__:
        if cls.__module__.startswith("redis") and name in owned(cls):
            return cls
    return None


def used_by_blocking(source: str = "") -> set[str]:
    """Every redis-py member blocking.py's classes reach, as "Class.name" (of `source`, when
    given, instead of the file)."""
    tree = ast.parse(source or Path(blocking.__file__).read_text())
    used: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in OURS:
            base = OURS[node.name]
            names = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            names |= {a.attr for a in ast.walk(node) if _on_self(a)}  # type: ignore[attr-defined]
            for name in names:
                owner = redis_owner(base, name)
                if owner is not None:
                    used.add(f"{owner.__name__}.{name}")
    return used


def _on_self(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute):
        return False
    value = node.value
    if isinstance(value, ast.Name):
        return value.id == "self"
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    )


def test_redis_py_is_the_version_the_clients_were_written_against() -> None:
    changed = [
        f"{member}: changed in this redis-py ({redis.__version__}); re-check {what}"
        for member, (expected, what) in sorted(GUARDED.items())
        if digest(member) != expected
    ]
    assert not changed, "\n".join(changed)


def test_every_redis_py_member_the_clients_reach_is_guarded() -> None:
    missing = used_by_blocking() - set(GUARDED)
    assert not missing, f"blocking.py reaches redis-py members not in GUARDED: {sorted(missing)}"


def test_the_guard_sees_a_change_and_a_new_member() -> None:
    """The checks above can fail: a changed source gives another digest, and a member the
    scan finds that GUARDED lacks is reported."""
    expected, _ = GUARDED["AbstractConnection.read_response"]
    source = inspect.getsource(AbstractConnection.read_response)
    assert sha256(source) == expected
    assert sha256(source + "\n") != expected
    assert "AbstractConnection.read_response" in used_by_blocking()
    assert redis_owner(Connection, "locator") is None  # ours, not redis-py's
    planted = (
        "class LocatedPool(ConnectionPool):\n"
        "    def make(self):\n"
        "        return self.make_connection()\n"
    )
    assert used_by_blocking(planted) - set(GUARDED) == {"ConnectionPool.make_connection"}
