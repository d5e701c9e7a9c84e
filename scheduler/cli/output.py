"""What the command-line client prints of a job: the original CLI's lines (CONTRACT 7:
`job_id=… node_id=… status=… command="…"`, Go's %q for the command), a status change seen
while waiting, a job's attempts (GET /jobs/{id}/attempts), and what `logs` and `events` print
besides the output itself (watch.py)."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from typing import Any, TextIO

from scheduler.models import unplaced
from scheduler.models.endings import FAILURE_WORDS

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES |= {"\v": "\\v", '"': '\\"', "\\": "\\\\"}


def go_quote(text: str) -> str:
    """Go's %q (strconv.Quote), which the original CLI used for the command."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


# Why a job is where it is, when the scheduler says: why it waits for a node, why it failed,
# whose queue it was taken from (work stealing).
REASONS = ("pending_reason", "failure_reason", "taken_from")
# When it is due (a delay, a retry's backoff), and the jobs it runs after. run_at is said
# only while the job is delayed until it: the record keeps it once due, set again by a
# dependency's release or a retry by hand (the dashboard's wait counts from it), when it no
# longer says what the job waits for.
WAITS_FOR = ("run_at", "after")
DUE_WHILE = "delayed"


def _listed(value: object) -> str:
    """A field as one word: a list's items joined by commas (`after=job-1,job-2`), a time
    to the second (`run_at=2026-12-24T06:00:00Z`; --json has it whole)."""
    return ",".join(map(str, value)) if isinstance(value, list) else _FRACTION.sub("Z", str(value))


def format_job(job: dict[str, Any]) -> str:
    """The original's printJob, and why the job is where it is (REASONS) and what it waits
    for (WAITS_FOR), when set (run_at while it is delayed)."""
    reason = "".join(f" {name}={job[name]}" for name in REASONS if job.get(name))
    due = job.get("status") == DUE_WHILE
    waits = [name for name in WAITS_FOR if job.get(name) and (name != "run_at" or due)]
    reason += "".join(f" {name}={_listed(job[name])}" for name in waits)
    text = (
        f"job_id={job.get('job_id', '')} node_id={job.get('node_id', '')} "
        f"status={job.get('status', '')}{reason} command={go_quote(job.get('command', ''))}\n"
    )
    if job.get("exit_code") is not None:
        killed = signalled(job["exit_code"])
        text += f"exit_code={job['exit_code']}{f' (signal: {killed})' if killed else ''}\n"
    for stream in ("stdout", "stderr"):
        if job.get(stream):
            text += f"{stream}:\n{_line_ended(job[stream])}"
    return text


def _line_ended(output: str) -> str:
    """An output as printed: what comes after it starts on a line of its own (the original
    ran the next job's line on after an output without its newline)."""
    return output if output.endswith("\n") else output + "\n"


def progress(job: dict[str, Any]) -> str:
    """One line for a status change seen while waiting: `job-3 running on node-1`, or
    `job-4 pending on no node (full)`."""
    line = f"{job.get('job_id', '')} {job.get('status', '')} on {job.get('node_id') or 'no node'}"
    return line + why(job) + "\n"


def why(job: dict[str, Any]) -> str:
    """` (timed_out, exit_code=-1)`: why it failed (or why it waits for a node, or whose
    queue it was taken from), if the scheduler says, and its exit code."""
    parts = [job[name] for name in REASONS[:2] if job.get(name)]
    if job.get("taken_from"):
        parts.append(f"taken from {job['taken_from']}")
    if job.get("exit_code") is not None:
        parts.append(exit_part(job["exit_code"]))
    return f" ({', '.join(parts)})" if parts else ""


def signalled(code: object) -> str:
    """The signal an exit code of 128+n names, as shells report a job killed by signal n
    (the reference agent's; the Rust agent's -1 names none): "SIGKILL" for 137, else ""."""
    if not isinstance(code, int) or not 128 < code < 256:
        return ""
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return ""


def exit_part(code: object) -> str:
    """`exit_code=137, signal: SIGKILL`, or `exit_code=3`."""
    killed = signalled(code)
    return f"exit_code={code}, signal: {killed}" if killed else f"exit_code={code}"


def attempt_line(job_id: str, attempt: dict[str, Any]) -> str:
    """`job-3 attempt 2 on node-1: failed (exit_code=3)`: one ended attempt."""
    code = attempt.get("exit_code")
    detail = "" if code is None else f" ({exit_part(code)})"
    where = f" on {attempt['node_id']}" if attempt.get("node_id") else ""
    return (
        f"{job_id} attempt {attempt.get('attempt', '?')}{where}: {attempt.get('reason')}{detail}\n"
    )


def keeps_running(job_id: str, follow: str = "") -> str:
    """What Ctrl-C during a wait (submit --wait, status --wait, logs -f) leaves: the job,
    which the command only watched, and how to follow it again (`follow`, by default
    `status --wait`) or stop it: `job-62 keeps running: scheduler status job-62 --wait, or
    scheduler cancel job-62`."""
    follow = follow or f"scheduler status {job_id} --wait"
    return f"{job_id} keeps running: {follow}, or scheduler cancel {job_id}\n"


def exit_status(job: dict[str, Any]) -> int:
    """The command's own exit code for a job that ended (0 when done; a failure that never
    got one from its command, a cancel say, or one out of a shell's 1..255, is 1)."""
    if job.get("status") == "done":
        return 0
    code = job.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def ended_code(status: str, exit_code: object) -> int:
    """`logs -f`'s exit code once the job ended: the job's own (a shell's, 0 to 255), else 0
    for done and 1 for failed (a failure never exits 0)."""
    if isinstance(exit_code, int) and 0 <= exit_code < 256 and (exit_code or status == "done"):
        return exit_code
    return 0 if status == "done" else 1


def dropped_output(count: object) -> str:
    """The note for output the scheduler no longer keeps (past LOG_MAX_BYTES)."""
    return f"[... {count} bytes of earlier output dropped (LOG_MAX_BYTES) ...]\n"


def dropped_events(shard: object, count: object) -> str:
    """The note for events trimmed before they were read (EVENTS_RETAIN_SECS); `count` None:
    the event it resumed after was trimmed too, so how many is not known."""
    many = "some" if count is None else count
    return f"[... {many} events of shard {shard} dropped (EVENTS_RETAIN_SECS) ...]\n"


def attempt_separator(attempt: object) -> str:
    return f"--- attempt {attempt} ---\n"


# An event line's columns: the time, the job, its change of status (`cancelling -> failed`).
JOB_WIDTH = 10
CHANGE_WIDTH = len("cancelling -> cancelling")
_FRACTION = re.compile(r"\.[0-9]+Z$")


def event_line(event: dict[str, Any]) -> str:
    """`2026-12-06T01:22:24Z  job-7       pending -> running        n1`, then `(failure_reason)`
    when set; a job just made comes from `new`, a move names both nodes."""
    at = _FRACTION.sub("Z", str(event.get("at", "")))
    change = f"{event.get('old_status') or 'new'} -> {event.get('status', '')}"
    node, was = str(event.get("node_id") or "-"), event.get("old_node_id")
    if was and was != event.get("node_id"):
        node = f"{was} -> {node}"
    reason = f"  ({event['failure_reason']})" if event.get("failure_reason") else ""
    job = str(event.get("job_id", ""))
    return f"{at}  {job:<{JOB_WIDTH}}  {change:<{CHANGE_WIDTH}}  {node}{reason}\n"


def table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Rows (the header first) as columns two spaces apart, each but the last as wide as its
    widest cell: the last (a command, a timestamp) is left as long as it is."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)))
        out.write(f"  {row[-1]}\n")


def write_bytes(data: bytes, out: TextIO) -> None:
    """`data` as it is on `out`'s own bytes when it has them (a terminal, a pipe), else as
    text: no newline added, none changed."""
    out.flush()
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(data.decode("utf-8", "replace"))
    else:
        buffer.write(data)
        buffer.flush()


# What would place a job waiting for a reason that does not pass by itself (models/unplaced.py
# LASTING: full and quota, a queue's wait, pass as the jobs ahead end), after unplaced.why
# says it.
HINTS = {
    "no_nodes": "it waits until an agent registers (`scheduler nodes` lists them)",
    "namespace": "it waits until one does (`scheduler nodes` shows their labels)",
    "no_fit": "it waits until one does (`scheduler nodes` shows what each offers)",
    "drained": "it waits until one is undrained (`scheduler undrain NODE`)",
    "exceeds_quota": "`scheduler namespace list` shows the quotas",
}
if set(HINTS) != set(unplaced.LASTING):
    raise TypeError("cli/output.py HINTS needs a hint for each of models/unplaced.py LASTING")


def unplaced_warning(job: dict[str, Any]) -> str:
    """`warning: job-12 has no node to run on (no_fit): no live node offers 99 cpus; it
    waits until one does (...)`: for a job just submitted that waits unplaced for a reason
    that does not pass by itself (LASTING); "" otherwise."""
    reason = job.get("pending_reason") or ""
    if reason not in HINTS or job.get("status") != "pending":
        return ""
    said = unplaced.why(
        reason,
        cpus=job.get("cpus") or 0,
        memory_mb=job.get("memory_mb") or 0,
        node_selector=job.get("node_selector") or {},
        namespace=job.get("namespace") or "",
    )
    job_id = job.get("job_id", "")
    return f"warning: {job_id} has no node to run on ({reason}): {said}; {HINTS[reason]}\n"


def ended_warning(job: dict[str, Any]) -> str:
    """`warning: job-36 has already failed (dependency_failed): a job it runs after failed,
    so it never ran (it runs after job-25: ...)`: for a job a submit answers that the
    scheduler has ended (one it runs after had failed; an --idempotency-key's job, ended
    since), in words (models/endings.py FAILURE_WORDS); "" otherwise."""
    reason = job.get("failure_reason") or ""
    if job.get("status") != "failed":
        return ""
    if not reason:  # its command failed: only an --idempotency-key's job, ended since
        code = job.get("exit_code")
        how = f"its command exited with code {code}" if code is not None else "it failed"
        return (
            f"warning: {job.get('job_id', '')} has already failed: {how} (the job this key made)\n"
        )
    words = FAILURE_WORDS.get(reason, reason)
    after = job.get("after") or []
    if reason == "dependency_failed" and after:
        words += f" (it runs after {', '.join(after)}: retry the one that failed and this one)"
    return f"warning: {job.get('job_id', '')} has already failed ({reason}): {words}\n"
