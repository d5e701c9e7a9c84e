"""A job's record in Redis from the stores' side (models/record.py says what is where): the
keys of its parts, the large parts staged on their way into a script, and the heads a script
answers made whole with their parts apart. Shared by the API's store (jobs.py) and the
workers' (sync_store.py), which each send the commands."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from scheduler.models.job import Job, JobUpdate
from scheduler.models.record import (
    OUTPUT_FIELDS,
    PART_COUNT,
    assemble,
    creation_parts,
    has_apart,
    is_large,
    wire,
)
from scheduler.nodes.placement import Placement
from scheduler.store.errors import PartsApart
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs
from scheduler.store.scripts.jobs import Created, Dedup, Polled
from scheduler.store.scripts.script import Call
from scheduler.store.shards import Numbering

# How long a staged part waits for its script (sent right behind it: a stale one is a
# request that died between the two).
STAGED_SECS = 300


class _Id(msgspec.Struct):
    job_id: str = ""


_id_decoder = msgspec.json.Decoder(_Id)


def head_id(head: bytes) -> str:
    """The job id of a record's head (models/record.py)."""
    return _id_decoder.decode(head).job_id


def job_parts(keys: Keys, job_id: str) -> list[str]:
    """The keys of the job's record, in the order `assemble` reads them: head, spec,
    outputs."""
    streams = [keys.job_output(job_id, stream) for stream in OUTPUT_FIELDS]
    return [keys.job(job_id), keys.job_spec(job_id), *streams]


@dataclass(frozen=True, slots=True)
class Staged:
    """Parts staged for a script: SET each of `values` (key -> value) with STAGED_SECS' TTL,
    then pass `tokens` (name -> token)."""

    values: dict[str, bytes | str]
    tokens: dict[str, str]


def stage(keys: Keys, parts: dict[str, bytes | str]) -> Staged:
    """Each of `parts` (name -> value) staged under a token of its own."""
    values, tokens = {}, {}
    for name, value in parts.items():
        tokens[name] = token = uuid.uuid4().hex
        values[keys.staged(token)] = value
    return Staged(values, tokens)


def creation(
    keys: Keys,
    job: Job,
    placement: Placement,
    now: float,
    node_ttl: float,
    dedup: Dedup,
    numbering: Numbering,
) -> tuple[Staged, Call[Created]]:
    """A new job's create call (jobs.create_job_of), and its spec staged when kept apart."""
    parts = creation_parts(job)
    staged = stage(keys, {"spec": parts.spec} if parts.spec else {})
    token = staged.tokens.get("spec", "")
    call = jobs.create_job_of(job, placement, now, node_ttl, dedup, token, parts, numbering)
    return staged, call


def large_outputs(update: JobUpdate) -> dict[str, bytes | str]:
    """The outputs of a report too large for the head (models/record.py): staged instead."""
    texts: dict[str, str] = {name: getattr(update, name) for name in OUTPUT_FIELDS}
    return {name: text for name, text in texts.items() if is_large(text)}


def apart_keys(keys: Keys, heads: Sequence[bytes]) -> tuple[list[int], list[str]]:
    """Of a script's heads, which name parts apart (their places), and the keys to MGET for
    them: the spec and outputs of each (`complete` puts them in)."""
    places = [i for i, head in enumerate(heads) if has_apart(head)]
    wanted = [key for i in places for key in job_parts(keys, head_id(heads[i]))[1:]]
    return places, wanted


def complete(
    heads: Sequence[bytes], places: Sequence[int], values: Sequence[bytes | None]
) -> list[bytes]:
    """The records of `heads`, those at `places` with their parts apart (`values`, as
    `apart_keys`' MGET answers them)."""
    width = PART_COUNT - 1
    apart = {i: values[n * width : (n + 1) * width] for n, i in enumerate(places)}
    return [
        assemble(head, apart[i][0], apart[i][1:]) if i in apart else wire(head)
        for i, head in enumerate(heads)
    ]


def polled_whole(reply: list[Any]) -> Polled:
    """A poll's reply read in the hot lane's callback: PartsApart (the handler's path reads
    them: ops.jobs.poll) when a job keeps parts apart."""
    polled = jobs.polled(reply)
    if any(has_apart(head) for head in polled.jobs):
        raise PartsApart()
    polled.jobs = [wire(head) for head in polled.jobs]
    return polled
