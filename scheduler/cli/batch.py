"""`scheduler submit --from FILE` and `scheduler submit CMD --count N`: many jobs, sent to
POST /jobs/batch by scheduler.client's `submit_many` (docs/GUIDE.md, Submitting many jobs).

--from reads JSON lines, a job (the POST /jobs body) a line, from a file or `-` (stdin); the
job options given beside it are each line's defaults (a line's own field wins, whole). An
array, --count N, is N copies of the job the options give, each with its index in the env
var TASK_INDEX (0 to N-1, as Slurm's SLURM_ARRAY_TASK_ID) and N in TASK_COUNT.

A FILE with no job in it (empty, or blank lines only) is a usage error (exit 2), as
options that do not go together are, and so is one of more than MAX_ARRAY_SIZE jobs (a
--count, a FILE's lines: as Slurm's MaxArraySize, a mistyped count is not 100,000 jobs). Each
job made prints its id on stdout, in order; each refused prints `line N: not made: <error>`
(`task I: ...` for an array) on stderr, a job's field said as the option that set it, then a
last line sums up (`made 10 of 20 jobs (task 0-9); 10 not made`), and the command exits 1.

Each batch is sent under an Idempotency-Key of its own (`<key>-<batch number>`, the key new
unless --idempotency-key names it) and sent again when its answer was lost: with the same
--idempotency-key, a run cut short can be run again, and the batches it sent answer the jobs
they made instead of making more.
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

from scheduler.cli.client import ARRAY_SIZE_RULE, MAX_ARRAY_SIZE, fields, usage_error
from scheduler.cli.job_options import idempotency_key, in_option_terms, job_body
from scheduler.cli.output import progress
from scheduler.cli.refusals import ClientError, submitting
from scheduler.client import BatchEntry, Client
from scheduler.client.jobs import part_key
from scheduler.models.batch import MAX_JOBS

TASK_INDEX, TASK_COUNT = "TASK_INDEX", "TASK_COUNT"
NO_JOBS_HINT = "it takes a JSON job (the POST /jobs body) a line"
# How the scheduler's refusals (a quota's) end; a line's own `not made` says it of its job,
# where the API's words, said of each, read as if the whole run made nothing.
NOTHING_MADE = "; nothing was made"

# What names a job in messages (("line", 7), ("task", 3)), and the job to send, or why it is
# not sent (a line that is not a JSON object), and the fields the line gave itself (an
# error about any other is said as the option that gave it: `--priority: ...`).
Name = tuple[str, int]
Item = tuple[Name, dict[str, Any] | str, frozenset[str]]


def submit_many(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    defaults = job_body(args)
    # Before a line is read: the longest key a request of the run may be sent under (the
    # last batch's, cut by the client in as many parts as it has jobs) must be one the
    # scheduler takes, or a run stops half made.
    last = _batch_key(args.idempotency_key, (MAX_ARRAY_SIZE - 1) // MAX_JOBS)
    longest = part_key(last, MAX_JOBS - 1)
    idempotency_key(args.idempotency_key, longest.removeprefix(args.idempotency_key))
    if args.from_file is not None:
        if args.count is not None or "command" in defaults:
            usage_error(args, "--from reads the jobs from FILE: no command, no --count")
        where = "- (stdin)" if args.from_file == "-" else args.from_file
        with _opened(args.from_file) as lines:
            # Read whole (to one past the cap) before a job is sent: too many is nothing made.
            items = list(itertools.islice(_lines(lines, defaults), MAX_ARRAY_SIZE + 1))
        if not items:  # an empty file is a mistake (a path, a redirect): not a run
            usage_error(args, f"--from {where} holds no jobs: {NO_JOBS_HINT}")
            return 2
        if len(items) > MAX_ARRAY_SIZE:
            usage_error(args, f"--from {where} holds over {MAX_ARRAY_SIZE} jobs: {ARRAY_SIZE_RULE}")
            return 2
        return _send_all(client, items, args, out, err)
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
        except json.JSONDecodeError as exc:
            # json's own `line 2 column 1` counts within this line (its newline too): said
            # by the file's line number and the column in it.
            yield name, f"not JSON: {exc.msg} (column {exc.pos + 1})", frozenset()
            continue
        if not isinstance(job, dict):
            yield name, "not a JSON object", frozenset()
            continue
        yield name, {**defaults, **job}, frozenset(job)


def _array(job: dict[str, Any], count: int) -> Iterator[Item]:
    for index in range(count):
        env = {**job.get("env_vars", {}), TASK_INDEX: str(index), TASK_COUNT: str(count)}
        yield ("task", index), {**job, "env_vars": env}, frozenset()


def _send_all(
    client: Client, items: Iterable[Item], args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    made: list[Name] = []
    ids: list[str] = []
    tried = 0
    for number, batch in enumerate(_batches(items)):
        jobs = [job for _, job, _ in batch if isinstance(job, dict)]
        entries = iter(_sent(client, jobs, _batch_key(key, number)) if jobs else [])
        for name, job, own in batch:
            entry = fields(next(entries)) if isinstance(job, dict) else {"error": job}
            if "job_id" in entry:
                made.append(name)
                ids.append(str(entry["job_id"]))
            elif entry.get("field") not in own:
                entry["error"] = in_option_terms(str(entry["error"]))
            tried += 1
            _say(name, entry, args.json, out, err)
    code = 0
    if len(made) < tried:
        out.flush()
        err.write(summary(made, tried))
        code = 1
    if args.wait:
        return max(code, _wait_all(client, list(zip(made, ids, strict=True)), args, out, err))
    return code


def _wait_all(
    client: Client, made: list[tuple[Name, str]], args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """--wait: each job made, in order, until it ends (a long-poll each: one ended already
    answers at once), its end a line on stderr as a single wait says it (`job-3 done on
    node-1 (exit_code=0)`; with --json its entry on stdout), then `ended: 18 done, 2 failed
    (task 4,9)`; exit 0 only when every one is done, as Slurm's `sbatch --wait` of an
    array."""
    args.on_interrupt = (
        "the jobs keep running: scheduler status ID --wait follows one, scheduler cancel ID... "
        "stops them\n"
    )
    failed: list[Name] = []
    for name, job_id in made:
        job = fields(client.wait(job_id, poll_secs=args.poll_secs))
        if args.json:
            ended = {"status": job.get("status"), "exit_code": job.get("exit_code")}
            out.write(json.dumps({name[0]: name[1], "job_id": job_id, **ended}) + "\n")
            out.flush()
        else:
            err.write(progress(job))
            err.flush()
        if job.get("status") != "done":
            failed.append(name)
    err.write(f"ended: {len(made) - len(failed)} done, {len(failed)} failed{_which(failed)}\n")
    return 1 if failed else 0


def _batch_key(key: str, number: int) -> str:
    """The Idempotency-Key the `number`th batch (from 0) of a run under `key` is sent with."""
    return f"{key}-{number}"


def summary(made: list[Name], tried: int) -> str:
    """`made 10 of 20 jobs (task 0-9); 10 not made`: the last line of a run some of whose
    jobs were refused (each said on its line above)."""
    return f"made {len(made)} of {tried} jobs{_which(made)}; {tried - len(made)} not made\n"


def _which(names: list[Name]) -> str:
    """` (task 0-9,12)`: what names these jobs, as runs ("" for none)."""
    return f" ({names[0][0]} {spans([number for _, number in names])})" if names else ""


def spans(numbers: list[int]) -> str:
    """Ascending numbers as runs: `0-9,12,14-15`."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _batches(items: Iterable[Item]) -> Iterator[list[Item]]:
    """`items` cut into batches of at most MAX_JOBS jobs (the client cuts one further when
    its JSON is too large for one request)."""
    batch: list[Item] = []
    jobs = 0
    for item in items:
        if jobs == MAX_JOBS:
            yield batch
            batch, jobs = [], 0
        batch.append(item)
        job = item[1]
        jobs += isinstance(job, dict)
    if batch:
        yield batch


def _sent(client: Client, jobs: list[dict[str, Any]], key: str) -> list[BatchEntry]:
    """Each job's entry (Made or Refused), in order; ClientError for a batch refused whole."""
    with submitting():
        entries = client.submit_many(jobs, idempotency_key=key)
    if len(entries) != len(jobs):
        raise ClientError("error: the scheduler did not answer an entry for each job")
    return entries


def _say(name: Name, entry: dict[str, Any], as_json: bool, out: TextIO, err: TextIO) -> None:
    """A job's line: its id (stdout) or `line N: not made: <error>` (stderr); with --json,
    its entry as JSON with what names it (`{"line": 7, "job_id": ...}`) on stdout."""
    if as_json:
        out.write(json.dumps({name[0]: name[1], **entry}) + "\n")
    elif "job_id" in entry:
        out.write(f"{entry['job_id']}\n")
    else:
        said = str(entry.get("error")).removesuffix(NOTHING_MADE)
        err.write(f"{name[0]} {name[1]}: not made: {said}\n")
