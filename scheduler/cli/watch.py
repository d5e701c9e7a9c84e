"""`scheduler logs` and `scheduler events` (docs/GUIDE.md, Watching jobs): a job's live output,
as text or followed until the job ends (`-f`), and the stream of every job's status changes.
Through scheduler.client's `Client`: `logs`, `follow_logs` and `events`, whose streams resume
after a lost connection without showing an event twice.

`logs -f` writes each chunk to the stream it came from (the job's stderr to stderr) and exits
with the job's exit code, so `scheduler logs -f job-7 && deploy` waits for a good end.
Everything else it says (an attempt's start, output dropped) goes to stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from scheduler.cli.client import _common, _handler, _job_id, _positive, fields
from scheduler.cli.output import (
    HINTS,
    attempt_separator,
    dropped_events,
    dropped_output,
    ended_code,
    event_line,
    keeps_running,
    write_bytes,
)
from scheduler.cli.refusals import ClientError
from scheduler.client import (
    Client,
    Dropped,
    Ended,
    EventItem,
    EventsDropped,
    Job,
    JobEvent,
    Output,
    Status,
)
from scheduler.models import unplaced
from scheduler.models.job import FINAL_STATUSES, NOT_STARTED
from scheduler.models.log import LOG_STREAMS
from scheduler.models.spans import span
from scheduler.models.wire import parse_rfc3339


def _note(text: str, out: TextIO, err: TextIO) -> None:
    """A line on stderr, after what stdout has so far (a terminal shows both in order)."""
    out.flush()
    err.write(text)
    err.flush()


def logs(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    if args.follow:
        return _follow_logs(args, client, out, err)
    found = client.logs(args.job_id, stream=args.stream, attempt=args.attempt)
    write_bytes(found.text.encode(), out)
    if found.dropped:
        _note(dropped_output(found.dropped), out, err)
    return 0


def _follow_logs(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """Each chunk to its stream as it comes, until the job's end: its exit code."""
    attempt, told = None, False
    args.on_interrupt = keeps_running(args.job_id, f"scheduler logs -f {args.job_id}")
    for item in client.follow_logs(args.job_id, stream=args.stream, attempt=args.attempt):
        if isinstance(item, Status) and not told:
            told = True  # the stream's first item: the job's status as it starts
            if item.status in NOT_STARTED:
                _note(_not_started(client.job(args.job_id), time.time()), out, err)
        elif isinstance(item, Output):
            if attempt is not None and item.attempt != attempt:
                _note(attempt_separator(item.attempt), out, err)
            attempt = item.attempt
            to = err if item.stream == "stderr" else out
            if to is err:
                out.flush()
            to.write(item.text)
            to.flush()
        elif isinstance(item, Dropped):
            _note(dropped_output(item.bytes), out, err)
        elif isinstance(item, Ended):
            if item.status != "done" and item.exit_code is None:
                _note(f"{args.job_id} {item.status}\n", out, err)
            out.flush()
            return ended_code(item.status, item.exit_code)
    # Not reached: the stream is followed until its end.
    raise ClientError(f"error: the scheduler ended {args.job_id}'s output without its end")


def _not_started(job: Job, now: float) -> str:
    """What a job not started yet waits for, from its record, in the words the scheduler's
    other messages use (models/unplaced.py why, output.py HINTS): `job-12 is pending on vm
    (not started yet): its output shows here when it runs`. "" for a job that has started
    (it did between the stream's start and this read)."""
    why = ""
    if job.status == "delayed" and job.run_at:
        waits = f"is delayed until {_until(parse_rfc3339(job.run_at), now)}"
    elif job.status == "waiting":
        waits = f"waits for {', '.join(job.after) or 'the jobs it runs after'} to be done"
    elif job.status == "pending" and job.pending_reason:
        waits = f"is pending on no node ({job.pending_reason})"
        why = unplaced.why_of(job)
        why += f"; {HINTS[job.pending_reason]}; " if job.pending_reason in HINTS else "; "
    elif job.status in NOT_STARTED:
        waits = f"is {job.status} on {job.node_id or 'no node'} (not started yet)"
    else:
        return ""
    return f"{job.job_id} {waits}: {why}its output shows here when it runs\n"


def _until(at: float, now: float) -> str:
    """`20:37:05 (in 4 min)`: the time as the user's clock reads it (with its date when a
    day or more away); `(due now)` once passed (the scheduler starts it soon)."""
    shape = "%H:%M:%S" if at - now < 86400 else "%Y-%m-%d %H:%M:%S"
    shown = time.strftime(shape, time.localtime(at))
    return f"{shown} ({'due now' if at <= now else 'in ' + _wait(at - now)})"


def _wait(secs: float) -> str:
    """A wait in whole seconds, at least one (`42 s`, `4 min 5 s`, `3 d`): models/spans.py."""
    return span(max(1, round(secs)))


def events(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """A line per event (or its JSON), until the stream ends (--no-follow), the job of --job
    ends (exit 0), or the command is stopped.

    --job reads the job first: one that does not exist (pruned, another namespace's) is its
    404 at once, as `logs -f`'s, where /events would wait for its events forever (its API
    is kept: a follower there may start before the job it waits for is made). A replay of
    the past (--since-start, --after, or a job that has ended: from now there would be
    nothing to wait for) shows every event kept up to now, a manual retry's too, and only
    then ends if the job has ended; followed from now, the job's next ending ends it."""
    job = client.job(args.job) if args.job else None
    ended = job is not None and job.status in FINAL_STATUSES
    read = functools.partial(
        client.events,
        job_id=args.job,
        node_id=args.node,
        status=args.status,
        schedule=args.schedule,
        namespace=args.namespace,
    )
    if job is None or not (args.since_start or args.after or ended):
        feed = read(after=args.after, since_start=args.since_start, follow=not args.no_follow)
        _print_events(feed, args.json, job is not None, out, err)
        return 0
    last = _print_events(
        read(after=args.after, since_start=not args.after, follow=False), args.json, False, out, err
    )
    if args.no_follow or ended or last.status in FINAL_STATUSES:
        return 0
    after = last.position or args.after
    _print_events(read(after=after, since_start=not after), args.json, True, out, err)
    return 0


@dataclass(frozen=True, slots=True)
class _Last:
    """The last item printed: its position (to go on after it) and, a job's event, the status
    it changed to ("" for none)."""

    position: str = ""
    status: str = ""


def _print_events(
    feed: Iterable[EventItem], as_json: bool, until_final: bool, out: TextIO, err: TextIO
) -> _Last:
    """Each item of the feed printed until it ends, or (`until_final`) until an event to a
    final status, the job's ending; the last one printed."""
    last = _Last()
    for item in feed:
        if isinstance(item, JobEvent):
            out.write(_as_json(item) if as_json else event_line(fields(item.change)))
            out.flush()
            last = _Last(item.position, item.change.status)
            if until_final and item.change.status in FINAL_STATUSES:
                break
        elif isinstance(item, EventsDropped):
            count = None if item.count < 0 else item.count
            _note(dropped_events(item.shard, count), out, err)
            last = _Last(item.position, last.status)
    return last


def _as_json(item: JobEvent) -> str:
    """The event as one line of JSON, with its `position` (what --after resumes after, and
    what a script keeps to go on from where it stopped)."""
    line = {**fields(item.change), "position": item.position}
    return json.dumps(line, separators=(",", ":")) + "\n"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "logs", help="a job's output so far; -f: as it comes, until the job ends (its exit code)"
    )
    _job_id(p)
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the output as it comes until the job ends, then exit with its exit code",
    )
    p.add_argument("--stream", choices=LOG_STREAMS, default="", help="only this stream")
    p.add_argument(
        "--attempt",
        type=_positive,
        default=0,
        metavar="N",
        help="this attempt's (default: the latest)",
    )
    _common(p, poll=False, json_option=False)
    p.set_defaults(handler=_handler(logs))

    p = sub.add_parser(
        "events", help="every job's status changes as they happen: scheduler events --job job-7"
    )
    p.add_argument("--job", default="", metavar="ID", help="only this job's, until it ends")
    p.add_argument("--node", default="", metavar="ID", help="only those on (or off) this node")
    p.add_argument(
        "--status", default="", metavar="S", help="only changes to this status (e.g. failed)"
    )
    p.add_argument("--schedule", default="", metavar="NAME", help="only this schedule's jobs'")
    p.add_argument("--namespace", default="", metavar="NS", help="only this namespace's jobs'")
    since = p.add_mutually_exclusive_group()
    since.add_argument(
        "--since-start", action="store_true", help="from the oldest event kept (default: from now)"
    )
    since.add_argument(
        "--after",
        default="",
        metavar="POSITION",
        help="after this event (its position, as --json prints it): resume",
    )
    p.add_argument("--no-follow", action="store_true", help="print the events kept, then exit")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(events))
