"""The return codes of the scripts, shared by their Lua (CODES) and the Python that reads
their replies; `check_access` turns node_access's refusals into exceptions."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.store.errors import Forbidden, StagedPartLost, StoreNotReady, Unauthorized

# Return codes shared by the scripts and the readers of their replies.
OK = 1
NOT_FOUND = 0
DUPLICATE = 2
FINISHED = 3
ALREADY_RUNNING = 4
NOT_RUNNING = 5
NO_NODES = 6
NOT_READY = 7
UNAUTHORIZED = 8
FORBIDDEN = 9
TOO_MANY_NODES = 10
ROLE_LOCKED = 11
OTHER_NODE = 12
CANCELLING = 13
NOT_CANCELLING = 14
MISMATCH = 15
NOT_DUE = 16
TOO_MANY = 17
NOT_FAILED = 18
UNKNOWN_AFTER = 19
BLOCKED = 20
NOT_PLACED = 21
NOT_STAGED = 22
OVER_QUOTA = 23

CODES = f"""
local OK, NOT_FOUND, DUPLICATE, FINISHED = {OK}, {NOT_FOUND}, {DUPLICATE}, {FINISHED}
local ALREADY_RUNNING, NOT_RUNNING, NO_NODES = {ALREADY_RUNNING}, {NOT_RUNNING}, {NO_NODES}
local NOT_READY, UNAUTHORIZED, FORBIDDEN = {NOT_READY}, {UNAUTHORIZED}, {FORBIDDEN}
local TOO_MANY_NODES, ROLE_LOCKED, OTHER_NODE = {TOO_MANY_NODES}, {ROLE_LOCKED}, {OTHER_NODE}
local CANCELLING, NOT_CANCELLING, MISMATCH = {CANCELLING}, {NOT_CANCELLING}, {MISMATCH}
local NOT_DUE, TOO_MANY, NOT_FAILED = {NOT_DUE}, {TOO_MANY}, {NOT_FAILED}
local UNKNOWN_AFTER, BLOCKED, NOT_PLACED = {UNKNOWN_AFTER}, {BLOCKED}, {NOT_PLACED}
local NOT_STAGED, OVER_QUOTA = {NOT_STAGED}, {OVER_QUOTA}
"""


def check_access(code: int) -> None:
    """Raises for the refusals of the Lua `node_access`."""
    if code == UNAUTHORIZED:
        raise Unauthorized()
    if code == FORBIDDEN:
        raise Forbidden()


def check_staged(code: int) -> None:
    """Raises StagedPartLost for NOT_STAGED: a large part the API staged for the script was
    gone when it ran (models/record.py)."""
    if code == NOT_STAGED:
        raise StagedPartLost()


def check_found(code: int, missing: Callable[[], Exception]) -> None:
    """Raises `missing()` for NOT_FOUND, StoreNotReady for NOT_READY (not found in a Redis that
    lost its data, its snapshot not back yet), else as check_access: the refusals of a script
    that looks a job, node or service up, then asks who may touch it."""
    if code == NOT_FOUND:
        raise missing()
    if code == NOT_READY:
        raise StoreNotReady()
    check_access(code)
