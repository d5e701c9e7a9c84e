"""The count of wrong credentials under a flood of addresses (api/guesses.py): the bar each
process keeps holds a bounded number of addresses, drops the ended ones without walking the
rest, and says so in a bounded number of log lines, while every address past the limit is
answered 429 all the same (its count in Redis says so). Pure logic: Redis's count is a dict
here, the clock a number."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest

from scheduler.api import guesses
from scheduler.api.guesses import Credentials

LIMIT = 2
WINDOW = 300.0
WRONG = [(b"authorization", b"Bearer wrong")]


class CountingStore:
    """COUNT_FAILURE's answers, each window WINDOW long from the test's clock."""

    def __init__(self) -> None:
        self.failures: Counter[str] = Counter()
        self.calls = 0

    async def run(self, call: Any) -> tuple[int, float]:
        self.calls += 1
        address = call.args[0]
        self.failures[address] += 1
        return self.failures[address], WINDOW


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def credentials(clock: Clock) -> Credentials:
    found = Credentials("k" * 43, limit=LIMIT, window_secs=WINDOW)
    found.clock = clock
    return found


def address(n: int) -> str:
    return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def flood(found: Credentials, store: CountingStore, addresses: range) -> list[int]:
    """LIMIT + 1 wrong credentials from each address: the status of each one's last."""

    async def go() -> list[int]:
        last = []
        for n in addresses:
            for _ in range(LIMIT + 1):
                status = (await found.refused(store, address(n), WRONG))[0]  # type: ignore[arg-type]
            last.append(status)
        return last

    return asyncio.run(go())


def test_the_bar_holds_a_bounded_number_of_addresses_and_each_is_429_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36 review: every address past the limit was kept in the bar, however many (an
    IPv6 attacker has a /64 per 11 requests, 2**16 of them in a /48)."""
    monkeypatch.setattr(guesses, "MAX_BARRED", 50)
    clock, store = Clock(), CountingStore()
    found = credentials(clock)
    assert flood(found, store, range(120)) == [429] * 120
    assert len(found.barred_until) == 50
    # Past the bound an address is answered from Redis's count, as before the limit.
    calls = store.calls
    assert asyncio.run(found.refused(store, address(119), WRONG))[0] == 429  # type: ignore[arg-type]
    assert store.calls == calls + 1
    # Once their windows end, room is made again.
    clock.now += WINDOW + 1
    store.failures.clear()
    assert flood(found, store, range(200, 210)) == [429] * 10
    assert sorted(found.barred_until) == sorted(address(n) for n in range(200, 210))


def test_barring_an_address_does_not_walk_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each new bar swept the whole bar for ended entries first: n addresses cost n**2/2
    steps (100,000 of them: 127 s of CPU on this machine). Counted here as the bar's entries
    looked at, not as time."""
    looked = Counter[str]()

    class Watched(dict[str, float]):
        def items(self) -> Any:
            looked["items"] += len(self)
            return super().items()

    clock, store = Clock(), CountingStore()
    found = credentials(clock)
    found.barred_until = Watched()
    flood(found, store, range(2000))
    assert len(found.barred_until) == 2000
    assert looked["items"] <= 2000


def test_a_flood_of_barred_addresses_is_said_in_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One WARNING an address was one line per address per window per process: 10,000
    addresses, 10,000 lines (journald drops a service's lines past 10,000 in 30 s, the
    real errors with them). At most one line a second; the next names how many were not."""
    caplog.set_level(logging.WARNING, logger="scheduler.api")
    clock, store = Clock(), CountingStore()
    found = credentials(clock)
    flood(found, store, range(1000))
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(f"{address(0)}: {LIMIT + 1} wrong credentials")
    clock.now += 1
    flood(found, store, range(1000, 1001))
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 2 and said[1].startswith(f"{address(1000)}: ")
    assert "999 other addresses barred since the last line" in said[1]
