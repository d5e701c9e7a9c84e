"""A running job's live output on the wire (docs/GUIDE.md, Watching jobs): the chunk an agent
sends (POST /jobs/{id}/output, our agent only) and what GET /jobs/{id}/logs?follow=1 streams.

The final report's stdout and stderr stay what they were (the record's, as the original's
clients read them); this is the output while the job runs, kept apart in Redis, capped at
LOG_MAX_BYTES per job over its attempts, and gone with the job.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from scheduler.models.record import OUTPUT_FIELDS
from scheduler.models.wire import InvalidInput

# The most one chunk may hold, in bytes of UTF-8 (the reference agent sends at most this).
CHUNK_MAX_BYTES = 64 * 1024
# A chunk's request body: its text JSON-escaped may be up to 6 bytes a byte ("\u0000").
CHUNK_BODY_MAX_BYTES = 6 * CHUNK_MAX_BYTES + 1024
# The job's output fields (Job's `part: output`: stdout, stderr), each a stream of its own.
LOG_STREAMS = OUTPUT_FIELDS


class OutputChunk(msgspec.Struct, forbid_unknown_fields=True):
    """`offset`: the bytes of `stream` this run of the job sent before this chunk."""

    node_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    stream: Literal["stdout", "stderr"]
    offset: Annotated[int, msgspec.Meta(ge=0, le=2**53)]
    data: Annotated[str, msgspec.Meta(min_length=1)]

    def check(self) -> None:
        if len(self.data.encode()) > CHUNK_MAX_BYTES:
            raise InvalidInput(f"invalid data: at most {CHUNK_MAX_BYTES} bytes of UTF-8")


chunk_decoder = msgspec.json.Decoder(OutputChunk)


class Accepted(msgspec.Struct):
    """POST /jobs/{id}/output's answer: the stream's next offset (a chunk it holds already
    answers the same: nothing is doubled)."""

    offset: int


class OffsetConflict(msgspec.Struct):
    """POST /jobs/{id}/output's 409: the chunk is not at the offset the stream expects,
    `offset`, from which the agent sends again."""

    error: str
    offset: int


class Output(msgspec.Struct):
    """One chunk as a follower gets it (an SSE `output` event; its id is the position)."""

    stream: str
    attempt: int
    text: str


class Status(msgspec.Struct):
    """The job's status, when a follower starts and each time it changes (an SSE `status`
    event: a retry's pending, a cancel's cancelling), so a view of the job stays true."""

    status: str


class Ended(msgspec.Struct, omit_defaults=True):
    """The job ended (an SSE `end` event, the stream's last): how."""

    status: str
    exit_code: int | None = None


class Dropped(msgspec.Struct):
    """Output the follower missed: trimmed from the log's start (LOG_MAX_BYTES) before it
    was read."""

    bytes: int
