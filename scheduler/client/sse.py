"""Server-Sent Events as the client reads them (`follow_logs`, `events`; the server's side is
api/follow.py): the lines of a stream parsed into events as the SSE spec says (HTML Living
Standard, "Server-sent events": `id`, `event`, `data`, `retry`, comments), and the plan that
follows a stream, reconnecting when a connection is lost before the stream's end.

A reconnection sends `Last-Event-ID`, the id of the last whole event read, so the server
starts after it: an event cut off by the drop (no blank line yet) is discarded, and sent
again whole; none is read twice or missed. It waits the server's `retry:` delay first,
doubled after each try that failed, and gives up once GIVE_UP_SECS pass with nothing heard.
The first connection is not retried: a scheduler that cannot be reached, or answers an
error, is the call's error at once, as for every other call.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field, replace

from scheduler.client.errors import ApiError, SchedulerError, Unavailable, Unreachable, api_error
from scheduler.client.steps import NOW, READ, Feed, Item, Lost, NotSent, Open, Reply, Request, Sleep

# A read that waits longer is a lost connection: the server sends a keepalive every 15 s
# (follow.py KEEPALIVE_SECS), so a silent minute is a dead one.
READ_TIMEOUT_SECS = 60.0
# Lost this long (no event or keepalive heard since): the call fails instead.
GIVE_UP_SECS = 60.0
# Before the first reconnection, until the server says its own (`retry:`; follow.py RETRY_MS).
RETRY_SECS = 2.0
# The longest wait between two tries, and the shortest after a failed one (a `retry: 0`
# must not become a tight loop against a scheduler that is down).
MAX_PAUSE_SECS = 10.0
MIN_BACKOFF_SECS = 0.25

_EOL = re.compile(r"\r\n|\r|\n")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its type (`message` when the server named none), its data (the `data`
    lines joined with newlines) and the last event id when it came."""

    name: str
    data: str
    id: str


@dataclass(slots=True)
class Parser:
    """Lines of a stream in, events out. `last_id` and `retry_secs` outlive a connection
    (they are what a reconnection sends and waits); the event being read does not."""

    last_id: str = ""
    retry_secs: float = RETRY_SECS
    _id: str = ""
    _name: str = ""
    _data: list[str] = field(default_factory=list)

    def line(self, line: str) -> Event | None:
        """The event this line completes (a blank line ends one), or None."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the server's keepalive
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._name = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and _DIGITS.fullmatch(value):
            self.retry_secs = int(value) / 1000
        return None  # any other field is ignored, as the spec says

    def _dispatch(self) -> Event | None:
        # The id counts even for a block without data (the spec's step 1 of dispatching).
        self.last_id = self._id
        data, name = self._data, self._name or "message"
        self._data, self._name = [], ""
        return Event(name, "\n".join(data), self.last_id) if data else None

    def lost(self) -> None:
        """The connection ended: the event it was in the middle of is not one."""
        self._data, self._name, self._id = [], "", self.last_id


class Lines:
    """The lines of a UTF-8 stream fed a chunk at a time (always UTF-8, whatever its headers
    say), ended by CRLF, LF or CR, a CR at a chunk's end held until the next says whether an
    LF follows it. A line the stream ends in the middle of is dropped: an event is whole
    only at its blank line."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending, self._first = "", True

    def feed(self, chunk: bytes) -> list[str]:
        text = self._pending + self._decoder.decode(chunk)
        if self._first and text:
            text, self._first = text.removeprefix("\ufeff"), False
        held = text.endswith("\r")
        *whole, self._pending = _EOL.split(text[:-1] if held else text)
        if held:
            self._pending += "\r"
        return whole

    def end(self) -> list[str]:
        """The line a CR held back, once the stream has ended."""
        return [self._pending[:-1]] if self._pending.endswith("\r") else []


def pause(retry_secs: float, failures: int) -> float:
    """The wait before a reconnection: the server's delay, then doubled after each failed try."""
    if not failures:
        return retry_secs
    return min(max(retry_secs, MIN_BACKOFF_SECS) * 2.0**failures, MAX_PAUSE_SECS)


@dataclass
class _Connection:
    """What a follow keeps between connections."""

    parser: Parser = field(default_factory=Parser)
    connected: bool = False
    failures: int = 0
    lost_since: float | None = None

    def heard(self) -> None:
        self.failures, self.lost_since = 0, None


def follow(request: Request, ends_at_eof: bool = False) -> Feed[Event]:
    """The events of GET `request`, reconnected until the caller stops reading or, with
    `ends_at_eof`, until the server ends the stream (it sent what was asked: `follow=0`).
    Without it, the stream ending is a lost connection (a server stopping ends its
    followers' streams)."""
    state = _Connection()
    while True:
        try:
            yield from _read_stream(request, state)
            if ends_at_eof:
                return
            # The server ended it (FOLLOW_MAX_SECS, a restart's drain): not a failure.
            state.heard()
            reason = "the scheduler ended the stream"
        except (NotSent, Lost, Unavailable) as exc:
            if not state.connected:
                raise _first_failure(exc) from None
            reason = str(exc) or type(exc).__name__
        state.parser.lost()
        now: float = yield NOW
        state.lost_since = now if state.lost_since is None else state.lost_since
        if now - state.lost_since >= GIVE_UP_SECS:
            raise Unreachable(f"lost the scheduler for {GIVE_UP_SECS:g} s: {reason}")
        yield Sleep(pause(state.parser.retry_secs, state.failures))
        state.failures += 1


def _first_failure(exc: Exception) -> SchedulerError:
    if isinstance(exc, SchedulerError):
        return exc
    return Unreachable(f"cannot reach the scheduler {exc}")


def _read_stream(request: Request, state: _Connection) -> Feed[Event]:
    """One connection, resumed after the last whole event: its events until it ends."""
    headers = {**request.headers, "Accept": "text/event-stream"}
    if state.parser.last_id:
        headers["Last-Event-ID"] = state.parser.last_id
    head: Reply = yield Open(replace(request, headers=headers), READ_TIMEOUT_SECS)
    _check(head)
    state.connected = True
    lines = Lines()
    while True:
        chunk: bytes = yield READ
        for line in lines.feed(chunk) if chunk else lines.end():
            event = state.parser.line(line)
            if event is not None or line.startswith(":"):
                state.heard()  # heard from: alive
            if event is not None:
                yield Item(event)
        if not chunk:
            return


def _check(head: Reply) -> None:
    """A 4xx is the call's error (ApiError); a 5xx is Unavailable, tried again."""
    if head.status >= 400:
        raise api_error(head.status, head.body, head.headers)
    kind = head.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        raise ApiError(
            head.status,
            f"the scheduler answered {kind or 'no content type'}, not an event stream: "
            "is it older than this client?",
        )
