"""api/errors.py: the API's Redis errors logged as an outage, not a line per 503."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from scheduler.api.errors import OutageLog


def test_a_long_outage_is_a_line_every_thirty_seconds_counting_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = OutageLog(clock=lambda: now[0])
    down = RedisConnectionError("Connection refused")
    with caplog.at_level(logging.ERROR, logger="scheduler.api"):
        for second in range(65):  # ten agents' polls a second for 65 s
            now[0] = 100.0 + second
            for _ in range(10):
                outage.failed("GET /jobs", down)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "redis error on GET /jobs: Connection refused",
        "redis error on GET /jobs: Connection refused (299 more since the last line)",
        "redis error on GET /jobs: Connection refused (299 more since the last line)",
    ]
