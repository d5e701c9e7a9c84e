"""`scheduler logs` and `scheduler events` (docs/GUIDE.md, Watching jobs): a job's live output,
as text or followed until the job ends (`-f`), and the stream of every job's status changes.
HTTP only, through the client's `Client`; both follow their Server-Sent Events with sse.py,
which resumes after a lost connection without showing an event twice.

`logs -f` writes each chunk to the stream it came from (the job's stderr to stderr) and exits
with the job's exit code, so `scheduler logs -f job-7 && deploy` waits for a good end.
Everything else it says (an attempt's start, output dropped) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO
from urllib.parse import quote

from scheduler.cli.client import Client, ClientError, _common, _handler, _job_id, _positive
from scheduler.cli.output import (
    attempt_separator,
    dropped_events,
    dropped_output,
    ended_code,
    event_line,
    write_bytes,
)
from scheduler.cli.sse import Event, Follower, refused
from scheduler.models.log import LOG_STREAMS


def _data(event: Event) -> dict[str, Any]:
    try:
        value = json.loads(event.data)
    except ValueError as exc:
        raise ClientError(f"decode: the {event.name} event: {exc}") from None
    if not isinstance(value, dict):
        raise ClientError(f"decode: the {event.name} event is not an object")
    return value


def _note(text: str, out: TextIO, err: TextIO) -> None:
    """A line on stderr, after what stdout has so far (a terminal shows both in order)."""
    out.flush()
    err.write(text)
    err.flush()


def logs(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    path = "/jobs/" + quote(args.job_id, safe="") + "/logs"
    params = {"stream": args.stream, "attempt": str(args.attempt or "")}
    params = {name: value for name, value in params.items() if value}
    if args.follow:
        return _follow_logs(
            args.job_id, Follower(client, path, {**params, "follow": "1"}), out, err
        )
    response = client.request("GET", path, params=params)
    if response.status_code >= 400:
        raise refused(response)
    write_bytes(response.content, out)
    dropped = response.headers.get("x-log-dropped", "0")
    if dropped.isdigit() and int(dropped):
        _note(dropped_output(dropped), out, err)
    return 0


def _follow_logs(job_id: str, follower: Follower, out: TextIO, err: TextIO) -> int:
    """Each chunk to its stream as it comes, until the job's end: its exit code."""
    attempt = None
    for event in follower.events():
        if event.name == "output":
            chunk = _data(event)
            if attempt is not None and chunk.get("attempt") != attempt:
                _note(attempt_separator(chunk.get("attempt")), out, err)
            attempt = chunk.get("attempt")
            to = err if chunk.get("stream") == "stderr" else out
            if to is err:
                out.flush()
            to.write(str(chunk.get("text", "")))
            to.flush()
        elif event.name == "dropped":
            _note(dropped_output(_data(event).get("bytes")), out, err)
        elif event.name == "end":
            end = _data(event)
            status, code = str(end.get("status", "")), end.get("exit_code")
            if status != "done" and code is None:
                _note(f"{job_id} {status}\n", out, err)
            out.flush()
            return ended_code(status, code)
    # Not reached: a follower reconnects when a stream ends without its `end`.
    raise ClientError(f"error: the scheduler ended {job_id}'s output without its end")


def events(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """GET /events: a line per event (or its JSON), until the stream ends (--no-follow) or
    the command is stopped."""
    params = {
        "job_id": args.job,
        "node_id": args.node,
        "status": args.status,
        "schedule": args.schedule,
        "after": "0" if args.since_start else args.after,
        "follow": "0" if args.no_follow else "",
    }
    params = {name: value for name, value in params.items() if value}
    follower = Follower(client, "/events", params, ends_at_eof=args.no_follow)
    for event in follower.events():
        if event.name == "job":
            out.write(_as_json(event) if args.json else event_line(_data(event)))
            out.flush()
        elif event.name == "dropped":
            dropped = _data(event)
            _note(dropped_events(dropped.get("shard"), dropped.get("events")), out, err)
    return 0


def _as_json(event: Event) -> str:
    """The event's data as one line of JSON, with its `position` (what --after resumes
    after, and what a script keeps to go on from where it stopped)."""
    return json.dumps({**_data(event), "position": event.id}, separators=(",", ":")) + "\n"


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
    p.add_argument("--job", default="", metavar="ID", help="only this job's")
    p.add_argument("--node", default="", metavar="ID", help="only those on (or off) this node")
    p.add_argument(
        "--status", default="", metavar="S", help="only changes to this status (e.g. failed)"
    )
    p.add_argument("--schedule", default="", metavar="NAME", help="only this schedule's jobs'")
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
