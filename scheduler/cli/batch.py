"""`scheduler submit --from FILE` and `scheduler submit CMD --count N`: many jobs, sent to
POST /jobs/batch by scheduler.client's `submit_many` (docs/GUIDE.md, Submitting many jobs).

--from reads JSON lines, a job (the POST /jobs body) a line, from a file or `-` (stdin); the
job options given beside it are each line's defaults (a line's own field wins, whole). An
array, --count N, is N copies of the job the options give, each with its index in the env
var TASK_INDEX (0 to N-1, as Slurm's SLURM_ARRAY_TASK_ID) and N in TASK_COUNT.

A FILE with no job in it (empty, or blank lines only) is a usage error (exit 2), as
options that do not go together are. Each job made prints its id on stdout, in order; each
refused prints `line N: <error>` (`task I: ...` for an array) on stderr, and the command
exits 1 when any was. Each batch is sent under an Idempotency-Key of its own (`<key>-<batch
number>`, the key new unless --idempotency-key names it) and sent again when its answer was
lost: with the same --idempotency-key, a run cut short can be run again, and the batches it
sent answer the jobs they made instead of making more.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from scheduler.cli.client import (
    ClientError,
    failing_as,
    fields,
    job_body_of,
    usage_error,
)
from scheduler.client import BatchEntry, Client
from scheduler.models.batch import MAX_JOBS

TASK_INDEX, TASK_COUNT = "TASK_INDEX", "TASK_COUNT"
NO_JOBS_HINT = "it takes a JSON job (the POST /jobs body) a line"

# What names a job in messages (("line", 7), ("task", 3)), and the job to send, or why it is
# not sent (a line that is not a JSON object).
Name = tuple[str, int]
Item = tuple[Name, dict[str, Any] | str]


def submit_many(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    if args.wait:
        usage_error(args, "--wait waits for one job: not with --from or --count")
    defaults = job_body_of(args)
    if args.from_file is not None:
        if args.count is not None or "command" in defaults:
            usage_error(args, "--from reads the jobs from FILE: no command, no --count")
        with _opened(args.from_file) as lines:
            items = _lines(lines, defaults)
            first = next(items, None)
            if first is None:  # an empty file is a mistake (a path, a redirect): not a run
                where = "- (stdin)" if args.from_file == "-" else args.from_file
                usage_error(args, f"--from {where} holds no jobs: {NO_JOBS_HINT}")
                return 2
            return _send_all(client, itertools.chain([first], items), args, out, err)
    if "command" not in defaults:
        usage_error(args, "--count makes copies of a command: give one")
    return _send_all(client, _array(defaults, args.count), args, out, err)


@contextlib.contextmanager
def _opened(name: str) -> Iterator[TextIO]:
    """The file named, or stdin for `-`."""
    if name == "-":
        yield sys.stdin
        return
    try:
        file = open(name, encoding="utf-8")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise ClientError(f"error: --from {name}: {exc.strerror}") from None
    with file:
        yield file


def _lines(lines: Iterable[str], defaults: dict[str, Any]) -> Iterator[Item]:
    """Each non-blank line's job (`defaults` under its fields), or why it is none."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        name = ("line", number)
        try:
            job = json.loads(line)
        except ValueError as exc:
            yield name, f"not JSON ({exc})"
            continue
        yield name, ({**defaults, **job} if isinstance(job, dict) else "not a JSON object")


def _array(job: dict[str, Any], count: int) -> Iterator[Item]:
    for index in range(count):
        env = {**job.get("env_vars", {}), TASK_INDEX: str(index), TASK_COUNT: str(count)}
        yield ("task", index), {**job, "env_vars": env}


def _send_all(
    client: Client, items: Iterable[Item], args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    failed = 0
    for number, batch in enumerate(_batches(items)):
        jobs = [job for _, job in batch if isinstance(job, dict)]
        entries = iter(_sent(client, jobs, f"{key}-{number}") if jobs else [])
        for name, job in batch:
            entry = fields(next(entries)) if isinstance(job, dict) else {"error": job}
            failed += "job_id" not in entry
            _say(name, entry, args.json, out, err)
    return 1 if failed else 0


def _batches(items: Iterable[Item]) -> Iterator[list[Item]]:
    """`items` cut into batches of at most MAX_JOBS jobs (the client cuts one further when
    its JSON is too large for one request)."""
    batch: list[Item] = []
    jobs = 0
    for name, job in items:
        if jobs == MAX_JOBS:
            yield batch
            batch, jobs = [], 0
        batch.append((name, job))
        jobs += isinstance(job, dict)
    if batch:
        yield batch


def _sent(client: Client, jobs: list[dict[str, Any]], key: str) -> list[BatchEntry]:
    """Each job's entry (Made or Refused), in order; ClientError for a batch refused whole."""
    with failing_as("submit"):
        entries = client.submit_many(jobs, idempotency_key=key)
    if len(entries) != len(jobs):
        raise ClientError("decode: the scheduler did not answer an entry for each job")
    return entries


def _say(name: Name, entry: dict[str, Any], as_json: bool, out: TextIO, err: TextIO) -> None:
    """A job's line: its id (stdout) or `line N: <error>` (stderr); with --json, its entry
    as JSON with what names it (`{"line": 7, "job_id": ...}`) on stdout."""
    if as_json:
        out.write(json.dumps({name[0]: name[1], **entry}) + "\n")
    elif "job_id" in entry:
        out.write(f"{entry['job_id']}\n")
    else:
        err.write(f"{name[0]} {name[1]}: {entry.get('error')}\n")
