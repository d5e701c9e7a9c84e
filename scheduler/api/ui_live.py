"""The job page's live output: while the job is unfinished, a section whose script follows
the job's output (GET /ui/jobs/{id}/logs: GET /jobs/{id}/logs?follow=1's stream, behind the
login cookie) with an EventSource and writes it into a <pre>.

The UI's one script besides the refresh (ui_refresh.py), in the page's one <script> with
it: its policy names it by its hash (ui_headers.with_script), it reads nothing from the page
but its section's data attributes, and the output, which anyone who can run a job writes,
goes in as text only (`textContent` of elements it creates; never markup). stderr is a
span of its own class, a gap in what the stream could send is said (`dropped`), a new
attempt is marked, and the <pre> follows the end while the reader is at its bottom. The
view keeps about as much as the server does (LOG_MAX_BYTES), its oldest chunks going.

The page's refresh (ui_refresh.py, whose script this one follows in the page's one
<script>) does not fight the stream: it reloads every period while no output has come (its
summary may change meanwhile: pending to running, another node), then not while the stream
shows output (a reload would take the reader's place: `refresh-hold`) unless its `status`
event says the job's status changed (a retry, a cancel: the summary would be wrong) or a
later attempt's output comes (a retry whose status changes fell between two of the stream's
reads), and once the stream's `end` says the job ended, so its final record shows
(`refresh-now`); each reload waits for the reader. A paused page (`refresh=off`) never
reloads: the section says what changed and how the job ended.
"""

from __future__ import annotations

from html import escape

from scheduler.api.ui_layout import View
from scheduler.models.job import FINAL_STATUSES, NOT_STARTED, Job, attempt_of

# The section's heading and what its state says once the stream is open: a job not started
# yet (pending, delayed, waiting) has nothing live to show, only the wait for its start.
HEADINGS = {True: ("Output as it runs", "waiting for it to start"), False: ("Live output", "live")}

# The section's script, as the page holds it (its hash is the policy's: change it freely,
# the hash follows). Plain ES5 in a function: nothing global.
SCRIPT = """
(function () {
  "use strict";
  var live = document.getElementById("live");
  var out = document.getElementById("live-output");
  var state = document.getElementById("live-state");
  var paused = live.getAttribute("data-paused") === "1";
  var keep = Number(live.getAttribute("data-keep"));
  var made = Number(live.getAttribute("data-attempt"));
  var shown = 0, attempt = 0;
  // The page's refresh (ui_refresh.py) reloads: told what the stream says.
  function tell(what) { if (!paused) { document.dispatchEvent(new Event(what)); } }
  function reload() { tell("refresh-now"); }
  function atBottom() { return out.scrollHeight - out.scrollTop - out.clientHeight < 4; }
  function add(text, kind) {
    var stick = atBottom();
    var span = document.createElement("span");
    span.className = kind;
    span.textContent = text;
    out.appendChild(span);
    shown += text.length;
    while (shown > keep && out.firstChild !== span) {
      shown -= out.firstChild.textContent.length;
      out.removeChild(out.firstChild);
    }
    if (stick) { out.scrollTop = out.scrollHeight; }
  }
  function note(text) {
    var last = out.lastChild;
    var cut = last && last.textContent.slice(-1) !== "\\n" ? "\\n" : "";
    add(cut + "[" + text + "]\\n", "note");
  }
  var source = new EventSource(live.getAttribute("data-src"));
  state.textContent = "connecting";
  // What the open stream means: the page says (a job not started has nothing to stream).
  source.addEventListener("open", function () {
    state.textContent = live.getAttribute("data-open");
  });
  source.addEventListener("output", function (event) {
    var chunk = JSON.parse(event.data);
    tell("refresh-hold");
    // A later attempt's output (a retry ran while this page read none of the status
    // changes: they came between two reads): the summary above is an earlier attempt's.
    if (!paused && chunk.attempt > made) { source.close(); reload(); return; }
    if (attempt && chunk.attempt !== attempt) { note("attempt " + chunk.attempt); }
    attempt = chunk.attempt;
    add(chunk.text, chunk.stream === "stderr" ? "stderr" : "stdout");
  });
  source.addEventListener("status", function (event) {
    var status = JSON.parse(event.data).status;
    if (status === live.getAttribute("data-status")) { return; }
    // The summary above shows the status the page was made with: a new page shows the new.
    if (paused) { state.textContent = "now " + status + " (reload for its record)"; }
    else { reload(); }
  });
  source.addEventListener("dropped", function (event) {
    note("dropped " + JSON.parse(event.data).bytes + " bytes");
  });
  source.addEventListener("end", function (event) {
    var end = JSON.parse(event.data);
    source.close();
    var code = typeof end.exit_code === "number" ? ", exit code " + end.exit_code : "";
    state.textContent = "ended: " + end.status + code + (paused ? " (reload for its record)" : "");
    if (!paused) { reload(); }
  });
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) {
      state.textContent = "disconnected";
      tell("refresh-resume");
    } else {
      state.textContent = "reconnecting";
    }
  });
})();
"""


def live_section(job: Job, view: View, keep: int) -> str:
    """The section of an unfinished job ("" for an ended one: the page shows its stored
    output), for SCRIPT: where the stream is, whether the page is paused, and about how
    many characters the view keeps (`keep`)."""
    if job.status in FINAL_STATUSES:
        return ""
    source = escape(f"/ui/jobs/{job.job_id}/logs")
    heading, opened = HEADINGS[job.status in NOT_STARTED]
    return (
        f'<section id="live" data-src="{source}" data-paused="{int(view.paused)}" '
        f'data-status="{escape(job.status)}" data-attempt="{attempt_of(job)}" '
        f'data-keep="{keep}" data-open="{opened}">'
        f'<h2>{heading} <span id="live-state" class="muted"></span></h2>'
        '<noscript><p class="muted">Following the output needs JavaScript: it shows on this '
        "page once the job ends.</p></noscript>"
        '<pre id="live-output" tabindex="0"></pre></section>'
    )
