"""What the guard tests of a dependency's internals share (tests/api/test_uvicorn_guard.py,
tests/store/test_redis_guard.py): a member's source as a sha256, what a class owns, and which
of its members our subclasses reach.

A method's digest is its source. An attribute's is the source of every method of its class
that mentions it (`self.<name>`), so a change in how the dependency sets or reads it shows.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import textwrap
from typing import Any


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def value_digest(value: Any) -> str:
    """A module constant's digest: its value."""
    return sha256(repr(value))


def member_digest(cls: type, name: str) -> str:
    """The digest of `cls.<name>`, a method or an attribute its methods use."""
    found = cls.__dict__.get(name)
    if inspect.isfunction(found):
        return sha256(inspect.getsource(found))
    using = [
        inspect.getsource(method)
        for method in vars(cls).values()
        if inspect.isfunction(method) and name in self_attributes(method)
    ]
    if not using:
        raise KeyError(f"{cls.__qualname__}.{name}: no such member")
    return sha256("".join(using))


# Cached by function: a guard asks about each method once per member it digests (a
# monkeypatched method is another function, read afresh).
@functools.cache
def self_attributes(function: Any, stored: bool = False) -> frozenset[str]:
    """The `self.<name>` attributes a function mentions (with `stored`: assigns)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return frozenset(
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (not stored or isinstance(node.ctx, ast.Store))
    )


def owned(cls: type) -> set[str]:
    """What a class defines itself: its methods and class attributes, and every attribute
    its methods assign on self."""
    names = set(vars(cls))
    for method in vars(cls).values():
        if inspect.isfunction(method):
            names |= self_attributes(method, stored=True)
    return names - {"__module__", "__doc__", "__dict__", "__weakref__", "__qualname__"}
