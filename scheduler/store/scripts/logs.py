"""The live output's scripts (GET and POST /jobs/{id}/output, GET /jobs/{id}/logs): a chunk
appended by its job's agent, the log read from a position. Redis keeps them as a stream per
job (keys.py `job_log`); lua/append_output.lua says how a chunk is checked and held."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.store.errors import JobNotFound, JobNotRunning, OffsetMismatch
from scheduler.store.scripts import codes
from scheduler.store.scripts.codes import check_found
from scheduler.store.scripts.script import Call, Script

STREAMS = {b"o": "stdout", b"e": "stderr"}


def _appended(reply: list[Any]) -> int:
    code = reply[0]
    if code == codes.MISMATCH:
        raise OffsetMismatch(int(reply[1]))
    if code == codes.NOT_RUNNING:
        raise JobNotRunning()
    check_found(code, JobNotFound)
    return int(reply[1])


APPEND_OUTPUT = Script("APPEND_OUTPUT", "job_id caller node stream offset data cap ttl", _appended)


def append_output(
    job_id: str,
    caller: str,
    node_id: str,
    stream: str,
    offset: int,
    data: str,
    cap: int,
    ttl: int,
) -> Call[int]:
    """The stream's next offset once `data` (sent at `offset`) is held; OffsetMismatch names
    the offset wanted, JobNotRunning: not running on `node_id`."""
    return APPEND_OUTPUT.call(
        job_id=job_id,
        caller=caller,
        node=node_id,
        stream=stream,
        offset=offset,
        data=data,
        cap=cap,
        ttl=ttl,
    )


@dataclass(frozen=True, slots=True)
class Chunk:
    """One entry of a job's log: its position (the stream entry's id), its stream, attempt
    and text."""

    position: str
    stream: str
    attempt: int
    written: int  # bytes the log was written before it: a reader's gap is what it missed
    text: bytes


@dataclass(frozen=True, slots=True)
class LogPage:
    """What READ_LOG answers: the chunks after a position, and the job as it is now."""

    status: str
    exit_code: int | None
    attempt: int
    dropped: int
    more: bool
    chunks: list[Chunk]


def _log_page(reply: list[Any]) -> LogPage:
    check_found(reply[0], JobNotFound)
    flat = reply[6:]
    chunks = [
        Chunk(
            str(flat[i], "ascii"),
            STREAMS[flat[i + 1]],
            int(flat[i + 2]),
            int(flat[i + 3]),
            flat[i + 4],
        )
        for i in range(0, len(flat), 5)
    ]
    exit_code = int(reply[2]) if reply[2] else None
    status = str(reply[1], "utf-8")
    return LogPage(status, exit_code, int(reply[3]), int(reply[4]), bool(reply[5]), chunks)


READ_LOG = Script("READ_LOG", "job_id after budget namespaces", _log_page, read_only=True)


def read_log(job_id: str, after: str, budget: int, namespaces: str = "") -> Call[LogPage]:
    """The chunks after position `after` ("": from the first), about `budget` bytes of them
    (at least one); JobNotFound without the job, or for a job outside `namespaces` (the
    caller's, models/namespace.py scope; "": every namespace)."""
    return READ_LOG.call(job_id=job_id, after=after or "-", budget=budget, namespaces=namespaces)
