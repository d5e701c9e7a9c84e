"""The job page's attempts (GET /jobs/{id}/attempts, models/attempt.py): a table below the
job's output, one row per ended attempt (node, started, ended, exit code, reason; a card of
labelled values on a phone's width, as the jobs list), its output tails folded below it
(the job's output above is the page's one obvious place), except the last attempt's when
they are the end of the job's own output: a link to it instead, not the bytes again. Every
value escaped. A row's id is its place in the table, not its attempt's number: two
attempts with one number (a record from before retries by hand kept counting) must not
make two elements of one id."""

from __future__ import annotations

import time
from html import escape

from scheduler.api.ui_layout import View, card_cells, status_badge
from scheduler.models.attempt import ATTEMPT_TAIL_BYTES, attempts_decoder

HEADINGS = ("attempt", "node", "started", "ended", "exit code", "reason")


def _folded(number: int, tails: list[tuple[str, str]]) -> str:
    """An attempt's output tails, folded: a click shows them ("" without any)."""
    if not tails:
        return ""
    names = ", ".join(name for name, _ in tails)
    pres = "".join(
        f'<div class="muted">{name}</div><pre class="{name}">{escape(text)}</pre>'
        for name, text in tails
    )
    return f"<details><summary>attempt {number}'s output ({names})</summary>{pres}</details>"


def attempts_section(
    blobs: list[bytes], view: View | None = None, own: tuple[str, str] = ("", "")
) -> str:
    """The "Attempts" heading and table of the attempts `blobs` (JSON each), oldest first;
    `own`: the job's stdout and stderr, which the last attempt's tails are not shown again
    when they end. "" while none ended: an empty table says nothing the summary does not."""
    if not blobs:
        return ""
    view = view or View(paused=False, now=time.time())
    attempts = attempts_decoder.decode(b"[" + b",".join(blobs) + b"]")
    head = "".join(f"<th>{h}</th>" for h in HEADINGS)
    rows = []
    for i, a in enumerate(attempts, start=1):
        exit_code = "" if a.exit_code is None else str(a.exit_code)
        plain = (escape(str(a.attempt)), escape(a.node_id))
        started = view.when(a.started_at) if a.started_at else "never started"
        shown = (*plain, started, view.when(a.ended_at), escape(exit_code), status_badge(a.reason))
        cells = card_cells(HEADINGS, tuple(("", html) for html in shown))
        rows.append(f'<tr id="attempt-{i}">{cells}</tr>')
        last = i == len(attempts)
        outputs = (("stdout", a.stdout, own[0]), ("stderr", a.stderr, own[1]))
        tails = [(name, text) for name, text, _ in outputs if text]
        if last and all(job_own.endswith(text) for _, text, job_own in outputs):
            # The job's own output ends with them: shown once, above.
            output = '<a href="#output">its output: the job\'s, above</a>' if tails else ""
        else:
            output = _folded(a.attempt, tails)
        if output:
            rows.append(f'<tr class="output"><td colspan="{len(HEADINGS)}">{output}</td></tr>')
    body = "".join(rows)
    note = (
        f'<p class="muted">The last {ATTEMPT_TAIL_BYTES} bytes of each output; '
        "the last attempt's, when it is the job's own output, only once, above.</p>"
    )
    table = (
        f'<div class="scroll"><table class="cards" id="attempts"><tr>{head}</tr>{body}</table>'
        "</div>"
    )
    return f"<h2>Attempts</h2>{table}{note}"
