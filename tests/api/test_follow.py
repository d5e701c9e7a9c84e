"""The follow loop (api/follow.py) alone: an idle follower reads once, sends keepalives and
no read until woken or its time is up; a read with more is followed by another at once."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.api import follow
from scheduler.api.follow import KEEPALIVE, START, Read


def run_follow(reads: list[Read], most_secs: float) -> tuple[list[bytes], int]:
    """What follow() yields with no channel to wake it, and how many reads it made."""
    calls = 0

    async def read() -> Read:
        nonlocal calls
        calls += 1
        return reads[min(calls, len(reads)) - 1]

    async def go() -> list[bytes]:
        return [chunk async for chunk in follow.follow([], read, lambda: False, most_secs)]

    return asyncio.run(go()), calls


def test_an_idle_follower_reads_once_then_only_keeps_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follow, "KEEPALIVE_SECS", 0.01)
    out, reads = run_follow([Read([])], most_secs=1.0)
    assert out[0] == START
    assert set(out[1:]) <= {KEEPALIVE}
    assert reads == 2  # the first, and the last when its time was up: none per keepalive


def test_a_read_with_more_is_followed_at_once_and_the_end_ends_it() -> None:
    pages = [Read([b"a"], more=True), Read([b"b"], more=True), Read([b"c"], over=True)]
    out, reads = run_follow(pages, most_secs=3600)
    assert out == [START, b"a", b"b", b"c"] and reads == 3
