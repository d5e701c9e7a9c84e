"""The CLI's reader of Server-Sent Events (`scheduler logs -f`, `scheduler events`; the server's
side is scheduler/api/follow.py): the lines of a stream parsed into events as the SSE spec
says (HTML Living Standard, "Server-sent events": `id`, `event`, `data`, `retry`, comments),
and the loop that reconnects when a connection is lost before the stream's end.

A reconnection sends `Last-Event-ID`, the id of the last whole event read, so the server
starts after it: an event cut off by the drop (no blank line yet) is discarded, and sent
again whole; none is shown twice or missed. It waits the server's `retry:` delay first,
doubled after each try that failed, and gives up once GIVE_UP_SECS pass with nothing heard.
The first connection is not retried: a scheduler that cannot be reached, or answers an
error, is the command's error at once, as for every other command.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import httpx

from scheduler.cli.client import Client, ClientError

# A read that waits longer fails: the server sends a keepalive every 15 s (follow.py
# KEEPALIVE_SECS), so a silent minute is a dead connection.
READ_TIMEOUT_SECS = 60.0
# Lost this long (no event or keepalive heard since): the command fails instead.
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


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a UTF-8 stream (always UTF-8, whatever its headers say), ended by CRLF, LF
    or CR, a CR at a chunk's end held until the next says whether an LF follows it. A line
    the stream ends in the middle of is dropped: an event is whole only at its blank line."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending, first = "", True
    for chunk in chunks:
        text = pending + decoder.decode(chunk)
        if first and text:
            text, first = text.removeprefix("\ufeff"), False
        held = text.endswith("\r")
        *whole, pending = _EOL.split(text[:-1] if held else text)
        yield from whole
        if held:
            pending += "\r"
    if pending.endswith("\r"):
        yield pending[:-1]


class Unavailable(Exception):
    """An answer to retry once connected before (5xx: the scheduler restarting, a proxy with
    no backend yet)."""


def refused(response: httpx.Response) -> ClientError:
    """The error a 4xx answer ends the command with: its status and the scheduler's message,
    as the other commands say it."""
    return ClientError(f"error: {returned(response)}")


def returned(response: httpx.Response) -> str:
    """`scheduler returned 404: job not found`: the answer's status and message."""
    body = response.read().decode("utf-8", "replace").rstrip("\n")
    return f"scheduler returned {response.status_code}: {body}"


@dataclass
class Follower:
    """GET `path` as a stream of events, reconnected until the caller stops reading (it has
    the stream's last event) or, with `ends_at_eof`, until the server ends the stream (it sent
    what was asked: `follow=0`). Without it, the stream ending is a lost connection (a server
    stopping ends its followers' streams)."""

    client: Client
    path: str
    params: dict[str, str]
    ends_at_eof: bool = False
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def events(self) -> Iterator[Event]:
        parser = Parser()
        connected, failures, lost_since = False, 0, None
        while True:
            try:
                with self._connect(parser.last_id) as response:
                    connected = True
                    for line in lines(response.iter_bytes()):
                        event = parser.line(line)
                        if event is not None or line.startswith(":"):
                            failures, lost_since = 0, None  # heard from: alive
                        if event is not None:
                            yield event
                if self.ends_at_eof:
                    return
                # The server ended it (FOLLOW_MAX_SECS, a restart's drain): not a failure.
                failures, lost_since = 0, None
                reason = "the scheduler ended the stream"
            except httpx.TransportError as exc:
                reason = str(exc) or type(exc).__name__
                if not connected:  # as every command: an unreachable scheduler is an error
                    raise ClientError(
                        f"error: cannot reach the scheduler at {self.client.url}: {reason}"
                    ) from None
            except Unavailable as exc:
                reason = str(exc)
                if not connected:
                    raise ClientError(f"error: {reason}") from None
            parser.lost()
            now = self.clock()
            lost_since = now if lost_since is None else lost_since
            if now - lost_since >= GIVE_UP_SECS:
                raise ClientError(
                    f"error: lost the scheduler at {self.client.url} for {GIVE_UP_SECS:g} s: "
                    f"{reason}"
                )
            self.sleep(pause(parser.retry_secs, failures))
            failures += 1

    @contextlib.contextmanager
    def _connect(self, last_id: str) -> Iterator[httpx.Response]:
        """One connection, resumed after `last_id`: its response once it is an event stream."""
        headers = {"Accept": "text/event-stream"}
        if last_id:
            headers["Last-Event-ID"] = last_id
        with self.client.stream(self.path, self.params, headers, READ_TIMEOUT_SECS) as response:
            _check(response)
            yield response


def pause(retry_secs: float, failures: int) -> float:
    """The wait before a reconnection: the server's delay, then doubled after each failed try."""
    if not failures:
        return retry_secs
    return min(max(retry_secs, MIN_BACKOFF_SECS) * 2.0**failures, MAX_PAUSE_SECS)


def _check(response: httpx.Response) -> None:
    """A 4xx ends the command (ClientError); a 5xx is Unavailable, tried again."""
    if response.status_code >= 500:
        raise Unavailable(returned(response))
    if response.status_code >= 400:
        raise refused(response)
    kind = response.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        raise ClientError(
            f"error: the scheduler at {response.url} answered {kind or 'no content type'}, "
            "not an event stream: is it older than this command?"
        )
