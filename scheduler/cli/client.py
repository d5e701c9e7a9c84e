"""The command-line client: `scheduler submit`, `status`, `cancel`, `list`, `nodes`.

Output is the original tinyaws CLI's (CONTRACT 7): `submitted <id> on node <node>
(status=<status>)`, `submit failed <code>: <body>`, and for a job `job_id=… node_id=… status=…
command="…"`, then `exit_code=N`, `stdout:` and `stderr:` blocks when present. New: `--json`
prints the scheduler's JSON instead, `submit --wait` waits and prints the job's own output (so
`scheduler submit 'echo hello' --wait` prints hello), `list`, `nodes`, `--env`, `--service`.
Everything that is not the command's result goes to stderr: the status changes `--wait` sees
(`job-3 running on node-1`), `list`'s `more: …` line, and after a 401 or 429 a hint naming
TINYAWS_API_KEY. SCHEDULER_URL (default http://127.0.0.1:9001) and TINYAWS_API_KEY come from
the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from scheduler.cli.job_options import OptionError, add_job_options, job_body
from scheduler.cli.output import attempt_line, exit_status, format_job, progress, why
from scheduler.config import Settings
from scheduler.models.job import FINAL_STATUSES as FINAL


class ClientError(Exception):
    """Ends the command with this message on stderr and exit status 1."""


MAX_WAIT_SECS = 60.0  # the API's bound on `wait`
SUBMIT_RETRY_PAUSES = (0.5, 1.0, 2.0)  # before each new try of a submit that got no answer


class Client:
    def __init__(
        self,
        url: str,
        api_key: str = "",
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self.has_key = bool(api_key)
        # Some answer refused the key (401, or 429 past the scheduler's limit of wrong ones,
        # said to a wrong key only): the command ends with a hint.
        self.unauthorized = False

    def auth_hint(self) -> str:
        """What to do about a refused key, naming TINYAWS_API_KEY."""
        if self.has_key:
            return "hint: the scheduler refused TINYAWS_API_KEY: set it to the scheduler's key"
        return "hint: the scheduler needs an API key: set TINYAWS_API_KEY to it"

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ClientError(
                f"error: cannot reach the scheduler at {self.url}: {reason}"
            ) from None
        if response.status_code in (401, 429):
            self.unauthorized = True
        return response

    @contextlib.contextmanager
    def stream(
        self, path: str, params: dict[str, str], headers: dict[str, str], read_secs: float
    ) -> Iterator[httpx.Response]:
        """GET `path`, its body read as it comes, a read waiting up to `read_secs` (a
        follower's: longer than the server's keepalive). httpx's errors are raised as they
        are: a follower (sse.py) reconnects after them."""
        t = self.http.timeout
        timeout = httpx.Timeout(connect=t.connect, read=read_secs, write=t.write, pool=t.pool)
        with self.http.stream(
            "GET", path, params=params, headers=headers, timeout=timeout
        ) as response:
            if response.status_code in (401, 429):
                self.unauthorized = True
            yield response

    def submit(self, body: dict[str, Any], key: str) -> httpx.Response:
        """POST /jobs under an Idempotency-Key: a POST whose answer was lost (the network, a
        restarting API) is sent again, and finds the job it made instead of a second one."""
        headers = {"Idempotency-Key": key}
        for pause in SUBMIT_RETRY_PAUSES:
            try:
                return self.request("POST", "/jobs", json=body, headers=headers)
            except ClientError:
                time.sleep(pause)
        return self.request("POST", "/jobs", json=body, headers=headers)

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        """The job's ended attempts, oldest first ([] from a scheduler that keeps none)."""
        response = self.request("GET", "/jobs/" + quote(job_id, safe="") + "/attempts")
        ended = response.json() if response.status_code == 200 else []
        return ended if isinstance(ended, list) else []

    def job(self, job_id: str, status_not: str = "", wait: float = 0) -> dict[str, Any]:
        """The job; with `wait`, answered once its status is not `status_not` (long-poll),
        or after `wait` seconds."""
        path = "/jobs/" + quote(job_id, safe="")
        if not wait:
            response = self.request("GET", path)
        else:
            params = {"wait": f"{wait:g}", "status_not": status_not}
            read = self.http.timeout.read
            timeout = None if read is None else read + wait
            response = self.request("GET", path, params=params, timeout=timeout)
        if response.status_code >= 400:
            body = response.text.rstrip("\n")
            raise ClientError(f"error: scheduler returned {response.status_code}: {body}")
        return _json_object(response)

    def wait(
        self,
        job_id: str,
        poll_secs: float,
        until: Callable[[dict[str, Any]], bool],
        each: Callable[[dict[str, Any]], None] = lambda job: None,
    ) -> dict[str, Any]:
        """Read the job until `until` says so, at least every `poll_secs`: each read after
        the first is a long-poll, answered as soon as the status changes."""
        status, wait = "", min(poll_secs, MAX_WAIT_SECS)
        while True:
            began = time.monotonic()
            job = self.job(job_id, status, wait if status else 0)
            each(job)
            if until(job):
                return job
            if job.get("status") == status:
                # The wait ran out, or a scheduler without long-poll answered at once.
                time.sleep(max(0.0, poll_secs - (time.monotonic() - began)))
            status = str(job.get("status", ""))


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError as exc:
        raise ClientError(f"decode: {exc}") from None
    if not isinstance(value, dict):
        raise ClientError("decode: the scheduler did not answer with a job object")
    return value


class _Changes:
    """Writes a progress line each time the waited job's status differs from the last seen,
    after a line for each attempt that ended since (with a `client` to read them from)."""

    def __init__(self, err: TextIO, status: str = "", client: Client | None = None) -> None:
        self.err, self.status, self.client, self.shown = err, status, client, 0

    def __call__(self, job: dict[str, Any]) -> None:
        if job.get("status") != self.status:
            self.status = str(job.get("status", ""))
            if self.client is not None:
                ended = self.client.attempts(str(job.get("job_id", "")))
                for attempt in ended[self.shown :]:
                    _echo(attempt_line(str(job.get("job_id", "")), attempt), self.err)
                self.shown = len(ended)
            _echo(progress(job), self.err)


def _print_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(value, indent=2) + "\n")


def usage_error(args: argparse.Namespace, message: str) -> None:
    """A usage error, as argparse says one (the usage, the message, exit 2): the options
    given do not go together."""
    error: Callable[[str], None] | None = getattr(args, "usage_error", None)
    if error is None:
        raise ClientError(f"error: {message}")
    error(message)


def job_body_of(args: argparse.Namespace) -> dict[str, Any]:
    """The job the options give (job_options.py), or ClientError saying which is wrong."""
    try:
        return job_body(args)
    except OptionError as exc:
        raise ClientError(f"error: {exc}") from None


def submit(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    if args.from_file is not None or args.count is not None:
        from scheduler.cli.batch import submit_many  # it imports this module

        return submit_many(args, client, out, err)
    body = job_body_of(args)
    if "command" not in body:
        usage_error(args, "the following arguments are required: command (or --from FILE)")
    response = client.submit(body, args.idempotency_key or str(uuid.uuid4()))
    if response.status_code >= 400:
        err.write(f"submit failed {response.status_code}: {response.text.rstrip(chr(10))}\n")
        return 1
    job = _json_object(response)
    if not args.json:
        where = f"on node {job.get('node_id')}" if job.get("node_id") else "on no node yet"
        reason = f", pending_reason={job['pending_reason']}" if job.get("pending_reason") else ""
        out.write(f"submitted {job.get('job_id')} {where} (status={job.get('status')}{reason})\n")
    if not args.wait:
        if args.json:
            _print_json(job, out)
        return 0
    out.flush()
    changes = _Changes(err, str(job.get("status", "")), client)
    # A service runs until stopped: wait until it has started (or ended).
    if body.get("job_type") == "service":
        started = lambda j: j.get("status") != "pending"  # noqa: E731
        job = client.wait(job["job_id"], args.poll_secs, started, changes)
        if args.json:
            _print_json(job, out)
        else:
            out.write(format_job(job))
        return 1 if job.get("status") == "failed" else 0
    job = client.wait(job["job_id"], args.poll_secs, lambda j: j.get("status") in FINAL, changes)
    if args.json:
        _print_json(job, out)
    else:
        out.write(job.get("stdout", ""))
        err.write(job.get("stderr", ""))
        if job.get("status") != "done":
            err.write(f"{job['job_id']} failed{why(job)}\n")
    return exit_status(job)  # the command's own


def status(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """With --wait, a progress line on stderr at each status change (stdout as the original's:
    the job at every poll, or the JSON at the end)."""
    changes = _Changes(err) if args.wait else (lambda job: None)
    if args.json:
        job = client.wait(
            args.job_id,
            args.poll_secs,
            lambda j: not args.wait or j.get("status") in FINAL,
            changes,
        )
        _print_json(job, out)
        return 0

    def each(job: dict[str, Any]) -> None:
        changes(job)
        _echo(format_job(job), out)

    # As the original: with --wait, the job is printed at every poll.
    client.wait(
        args.job_id, args.poll_secs, lambda j: not args.wait or j.get("status") in FINAL, each
    )
    for attempt in client.attempts(args.job_id) if args.attempts else []:
        out.write(attempt_line(args.job_id, attempt))
    return 0


def cancel(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    """DELETE /jobs/{id}: a pending job is cancelled at once; a running one is cancelling
    until its agent has stopped it (--wait waits for that)."""
    response = client.request("DELETE", "/jobs/" + quote(args.job_id, safe=""))
    if response.status_code >= 400:
        body = response.text.rstrip("\n")
        raise ClientError(f"cancel failed {response.status_code}: {body}")
    job = _json_object(response)
    if args.wait and job.get("status") not in FINAL:
        job = client.wait(args.job_id, args.poll_secs, lambda j: j.get("status") in FINAL)
    if args.json:
        _print_json(job, out)
    else:
        _echo(format_job(job), out)
    return 0


def _echo(text: str, out: TextIO) -> None:
    out.write(text)
    out.flush()


Command = Callable[[argparse.Namespace, Client, TextIO, TextIO], int]


def _handler(command: Command) -> Callable[[argparse.Namespace, Settings], int]:
    def handle(args: argparse.Namespace, settings: Settings) -> int:
        url = args.scheduler_url or settings.scheduler_url
        client = Client(url, settings.api_key, settings.http_timeout_secs)
        try:
            code = command(args, client, sys.stdout, sys.stderr)
        except ClientError as exc:
            sys.stdout.flush()
            print(exc, file=sys.stderr)
            code = 1
        except KeyboardInterrupt:
            return 130
        finally:
            client.close()
        if client.unauthorized:
            print(client.auth_hint(), file=sys.stderr)
        return code

    return handle


def _common(parser: argparse.ArgumentParser, poll: bool = True, json_option: bool = True) -> None:
    if json_option:
        parser.add_argument("--json", action="store_true", help="print the scheduler's JSON")
    parser.add_argument("--scheduler-url", default="", help="default: $SCHEDULER_URL")
    if poll:
        parser.add_argument(
            "--poll-secs", type=float, default=2.0, help="--wait polls this often (default 2)"
        )


def _job_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's id, e.g. job-1")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("submit", help="submit a job: scheduler submit 'echo hello' --wait")
    add_job_options(p, optional_command=True)
    p.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="many jobs: a JSON job (the POST /jobs body) a line, `-` for stdin; the job "
        "options are each line's defaults. Prints each id, each error with its line",
    )
    p.add_argument(
        "--count",
        type=_positive,
        metavar="N",
        help="an array: N copies of the job, each with TASK_INDEX (0..N-1) and TASK_COUNT "
        "in its env (as Slurm's SLURM_ARRAY_TASK_ID); prints each id",
    )
    p.add_argument(
        "--idempotency-key",
        default="",
        metavar="KEY",
        help="the same key: the same job (with --from or --count: the same jobs)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the end (status changes on stderr), print its output",
    )
    _common(p)
    p.set_defaults(handler=_handler(submit), usage_error=p.error)

    p = sub.add_parser("status", help="show a job: scheduler status job-1 [--wait]")
    _job_id(p)
    p.add_argument(
        "--wait", action="store_true", help="poll until it ends (status changes on stderr)"
    )
    p.add_argument("--attempts", action="store_true", help="then each attempt, as it ended")
    _common(p)
    p.set_defaults(handler=_handler(status))

    p = sub.add_parser(
        "cancel", help="cancel a job, or stop a service: scheduler cancel job-1 [--wait]"
    )
    _job_id(p)
    p.add_argument("--wait", action="store_true", help="wait until the job is cancelled")
    _common(p)
    p.set_defaults(handler=_handler(cancel))
