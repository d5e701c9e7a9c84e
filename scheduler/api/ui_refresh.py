"""The UI's refresh: a page that changes by itself (a list, a dashboard, an unfinished job)
reloads every UI_REFRESH_SECS, but never while the reader is doing something on it. A
`<meta http-equiv="refresh">` cannot wait: it closed the cancel question a reader had just
opened and wiped the search they were typing. So the refresh is this script, last in the
page's body (its policy names it by its hash: ui_headers.with_script), and the meta refresh
is kept only for a browser that runs no script (inside <noscript>).

The reader is at something while a form field has focus, while a field holds anything but
what the page came with (typed text, another choice), and while a <details> the page came
closed is open (the cancel question, folded output lines). Then the page does not reload;
it does once the reader has left it alone for a whole period.

The job page's live output (ui_live.py) shares the page's one script (`page_script`) and
tells this one, by events on the document, what its stream says: `refresh-hold` (output
shows: a reload would take the reader's place in it), `refresh-resume` (the stream is
gone: reload every period again), `refresh-now` (the job's status changed or it ended: the
summary is stale). Each reload still waits for the reader.
"""

from __future__ import annotations

# Plain ES5 in a function: nothing global. Polled a few times a second: focus, typing and
# a <details>' toggle each have their own events, a poll sees them all the same way.
SCRIPT = """
(function () {
  "use strict";
  var wait = Number(document.body.getAttribute("data-refresh")) * 1000;
  var step = Math.min(250, wait);
  var details = document.getElementsByTagName("details");
  var fields = document.querySelectorAll("input, select, textarea");
  var closed = [];
  for (var i = 0; i < details.length; i++) { closed.push(!details[i].open); }
  // since: when the period began (the load, the stream gone); touched: when the reader was
  // last at something (0: not yet).
  var since = Date.now(), touched = 0, held = false, due = false, leaving = false;
  // A reload must never take the place of a page the reader is going to; one they came
  // back to (the browser's back-forward cache) reloads again.
  window.addEventListener("beforeunload", function () { leaving = true; });
  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("pageshow", function () { leaving = false; });
  document.addEventListener("refresh-hold", function () { held = true; });
  document.addEventListener("refresh-resume", function () { held = false; since = Date.now(); });
  document.addEventListener("refresh-now", function () { due = true; });
  function changed(field) {
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT") {
      var first = 0;  // no option marked selected: the first is the default
      for (var j = 0; j < field.options.length; j++) {
        if (field.options[j].defaultSelected) { first = j; }
      }
      return field.selectedIndex !== first;
    }
    return field.value !== field.defaultValue;
  }
  function busy() {
    var active = document.activeElement;
    if (active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) { return true; }
    for (var i = 0; i < details.length; i++) {
      if (details[i].open && closed[i]) { return true; }
    }
    for (var k = 0; k < fields.length; k++) {
      if (changed(fields[k])) { return true; }
    }
    return false;
  }
  function tick() {
    var now = Date.now();
    if (busy()) { touched = now; }
    else if (!leaving && now - touched >= wait && (due || (!held && now - since >= wait))) {
      location.reload();
      return;
    }
    setTimeout(tick, step);
  }
  setTimeout(tick, step);
})();
"""


def page_script(refreshing: bool, own: str) -> str:
    """The page's one inline script: the refresh's when it reloads itself (not paused),
    then the page's `own` (the live output's), whose events the refresh's listens to."""
    return (SCRIPT if refreshing else "") + own


def secs_text(secs: float) -> str:
    """A period as the pause link and the script say it: 5, 0.5."""
    return f"{secs:g}"
