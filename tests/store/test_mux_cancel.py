"""A cancel of a call that is connecting ends the call, however the connect ended: the API's
background loops (keyring.keep_fresh, metrics.keep_flushing) are stopped by a cancel at
shutdown, and one that lost it looped on, its lifespan's shutdown awaiting it for ever (an API
process of `serve` that never stopped, and `serve` waiting for it: tests/cli/test_lifeline.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.exceptions import RedisError

from scheduler.store.connection.mux import MuxRedis

# Enough turns of the loop for the call to start its connect, the connect to fail, and the call
# to see the failure: every moment of it gets a cancel.
TURNS = 8


@pytest.mark.parametrize("turns", range(TURNS))
def test_a_cancel_is_never_lost_to_a_connect_ending_in_the_same_turn(
    tmp_path: Path, turns: int
) -> None:
    # Python 3.11's asyncio.wait_for, cancelled after the awaited connect had ended but
    # before it resumed, returned the connect's result or raised its error in place of the
    # CancelledError (CPython gh-86296): a refused connect became a RedisError, which the
    # loops catch and go on.
    async def scenario() -> None:
        mux = MuxRedis(f"unix://{tmp_path / 'absent.sock'}")
        call = asyncio.ensure_future(mux.execute("PING"))
        for _ in range(turns):
            await asyncio.sleep(0)
        if not call.cancel():
            with pytest.raises(RedisError):
                await call  # it had ended before the cancel: a refused connect
            return
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())
