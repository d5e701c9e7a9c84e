"""A running job's stdout and stderr sent to the scheduler while it runs, in chunks: `POST
/jobs/{id}/output` (ours only: the Rust agent never calls it, and nothing of its protocol
changes; the call is here rather than in remote.py, which holds the protocol both speak).

Per run job, a `LiveOutput` takes the process's output as the executor reads it
(executor.OutputTee), decodes each stream with an incremental UTF-8 decoder (a chunk never splits
a character; invalid bytes become U+FFFD) and sends it in order, one request in flight per job:
{"node_id", "stream", "offset", "data"}, where `offset` is how many UTF-8 bytes of that stream
the scheduler acknowledged before the chunk. A stream is sent once it holds a chunk
(output_chunk_bytes, at most 64 KiB), else at once when it sent nothing for output_flush_secs
(a line after a quiet spell shows at once), else output_flush_secs after its last chunk: at most
one chunk a stream per output_flush_secs for a job that writes all the time.

The answers: 200 {"offset": N}, the next chunk goes at N (a retried chunk it already holds
answers the same N: nothing is doubled); 409 {"offset": N}, it expects N (it lost or never saw
earlier data): what is unsent goes there, what it acknowledged is not sent again; a network
error or a 5xx, the same chunk again with backoff while the job runs; 404 or 405 (the job ended,
moved or was cancelled, or a scheduler without live output), 400, 413 or another refusal: no more
of this job's output is sent live (said once). A refused node token is renewed as for a report.

Nothing here holds the job up: what the scheduler has not taken waits in a buffer of
output_buffer_bytes per stream, past which the oldest unsent bytes give way to a marker (offsets
count what was sent, so there is no gap). When the job ends its streams are flushed, for at most
FINAL_FLUSH_SECS, before the report, which carries the job's bounded output as before.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Annotated, Literal

import httpx
import msgspec

from scheduler.agent.remote import Remote
from scheduler.models.log import LOG_STREAMS

log = logging.getLogger("scheduler.agent")

# How long the end of a job's output may hold its report: about one call's timeout.
FINAL_FLUSH_SECS = 5.0
BACKOFF_CAP_SECS = 10.0
# 409s in a row for one chunk (each naming another offset) before its stream is given up: a
# scheduler that keeps moving its offset does not get the same chunk for ever.
MAX_REBASES = 3
MARKER = "\n[agent: {dropped} bytes of output not sent]\n"


class _Held(msgspec.Struct):
    offset: Annotated[int, msgspec.Meta(ge=0)]


_held_decoder = msgspec.json.Decoder(_Held)


@dataclass(frozen=True, slots=True)
class Sent:
    """The scheduler's answer to a chunk: "held" (the next chunk goes at `offset`), "rebase"
    (409: it expects `offset`), "retry" (a network error, a 5xx: the same chunk again later) or
    "stop" (it takes no more of this job's output: `status` says why)."""

    what: Literal["held", "rebase", "retry", "stop"]
    offset: int = 0
    why: str = ""
    status: int = 0


def answer(response: httpx.Response) -> Sent:
    code = response.status_code
    if code >= 500:
        return Sent("retry", why=f"HTTP {code}", status=code)
    if response.is_success or code == 409:
        with contextlib.suppress(msgspec.DecodeError):
            offset = _held_decoder.decode(response.content).offset
            what: Literal["held", "rebase"] = "held" if response.is_success else "rebase"
            return Sent(what, offset, why=f"HTTP {code}", status=code)
    return Sent("stop", why=f"HTTP {code} {response.text.strip()[:200]}", status=code)


async def send(remote: Remote, job_id: str, stream: str, offset: int, data: str) -> Sent:
    """One chunk, with the agent's credentials (those of its report)."""
    body = {"node_id": remote.config.node_id, "stream": stream, "offset": offset, "data": data}
    url = remote._job_url(job_id) + "/output"
    for _ in range(2):  # once more with a token renewed on the way
        try:
            response = await remote.http.post(url, json=body, headers=remote._auth())
        except httpx.HTTPError as exc:
            return Sent("retry", why=str(exc) or type(exc).__name__)
        if not await _renewed(remote, response):
            return answer(response)
    return Sent("retry", why="the renewed node token was refused too")


async def _renewed(remote: Remote, response: httpx.Response) -> bool:
    """Remote._renewed, except that this call's refusal alone is not taken for a stale token: a
    scheduler from before live output, with a key, answers 401 to a path it does not know
    whatever the token (and dropping a good token to register again could lose the node: the
    join key registers free ids only). The heartbeat, which every scheduler serves, tells: it
    renews a stale token itself; if it takes the token, this scheduler refuses live output, and
    the agent stops asking it (Remote.live_refused)."""
    sent = remote._refused_token(response)
    if not sent:
        return False
    if remote.token == sent and await remote.heartbeat():
        if not remote.live_refused:
            log.warning(
                "the scheduler at %s refuses live output with the node token it takes "
                "elsewhere (a version without it?): jobs' output goes in their reports only",
                remote.config.scheduler_url,
            )
        remote.live_refused = True
        return False
    return bool(remote.token) and remote.token != sent


def _boundary_after(data: bytearray, at: int) -> int:
    """The first character boundary at or after `at` (`data` is valid UTF-8)."""
    while at < len(data) and data[at] & 0xC0 == 0x80:
        at += 1
    return at


def _boundary_before(data: bytearray, at: int) -> int:
    """The last character boundary at or before `at`."""
    if at >= len(data):
        return len(data)
    while at > 0 and data[at] & 0xC0 == 0x80:
        at -= 1
    return at


class _Stream:
    """One stream's output the scheduler has not acknowledged, as valid UTF-8 (decoded, then
    encoded again), so that offsets count the bytes of the text sent."""

    def __init__(self, name: str, buffer_bytes: int) -> None:
        self.name = name
        self.buffer_bytes = buffer_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.unsent = bytearray()
        self.dropped = 0  # bytes dropped from the front of `unsent` since the last chunk
        self.since: float | None = None  # when the oldest unsent byte came
        self.last_taken = -math.inf  # when its last chunk was taken to be sent
        self.offset = 0  # the bytes of this stream the scheduler holds
        self.sending = b""  # the chunk under way (in no buffer meanwhile)

    def feed(self, data: bytes, now: float, final: bool = False) -> bool:
        """Take the process's bytes; True when older unsent bytes were dropped for them."""
        encoded = self.decoder.decode(data, final).encode()
        if not encoded:
            return False
        if self.since is None:
            self.since = now
        self.unsent += encoded
        excess = len(self.unsent) - self.buffer_bytes
        if excess <= 0:
            return False
        cut = _boundary_after(self.unsent, excess)
        del self.unsent[:cut]
        self.dropped += cut
        return True

    def due(self, flush_secs: float, chunk_bytes: int, ended: bool) -> float | None:
        """When this stream is to be sent (-inf: now), None when nothing waits."""
        if not self.unsent and not self.dropped:
            return None
        if ended or self.dropped or len(self.unsent) >= chunk_bytes or self.since is None:
            return -math.inf
        return max(self.since, self.last_taken + flush_secs)

    def take(self, chunk_bytes: int, now: float) -> bytes:
        """The next chunk: at most `chunk_bytes`, whole characters, the marker first when
        bytes were dropped before it."""
        head = MARKER.format(dropped=self.dropped).encode() if self.dropped else b""
        cut = _boundary_before(self.unsent, max(chunk_bytes - len(head), 0))
        if cut == 0 and not head:  # a character longer than a chunk: never an empty one
            cut = _boundary_after(self.unsent, 1)
        chunk = head + bytes(self.unsent[:cut])
        self.last_taken = now
        del self.unsent[:cut]
        self.dropped = 0
        if not self.unsent:
            self.since = None
        return chunk

    def left(self) -> int:
        return len(self.sending) + len(self.unsent) + self.dropped

    def clear(self) -> None:
        self.unsent.clear()
        self.dropped, self.sending = 0, b""


class LiveOutput:
    """One run job's live output (the module's docstring): fed by the executor as it reads the
    pipes, sent by one task, flushed by `finish` before the report. Never raises to the job."""

    def __init__(self, remote: Remote, job_id: str) -> None:
        config = remote.config
        self.remote = remote
        self.job_id = job_id
        self.flush_secs = config.output_flush_secs
        self.chunk_bytes = config.output_chunk_bytes
        self.backoff_secs = config.report_backoff_secs
        self.streams = {name: _Stream(name, config.output_buffer_bytes) for name in LOG_STREAMS}
        self.wake = asyncio.Event()  # output came, or the job ended
        self.ended = asyncio.Event()
        self.stopped = False  # the scheduler takes no more (or a bug): nothing more is sent
        self.said_dropping = False
        self.task = asyncio.create_task(self._send_all())

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def feed(self, stream: str, chunk: bytes) -> None:
        """The process wrote `chunk` to `stream` (executor.OutputTee): buffered, never waits."""
        if self.stopped or self.ended.is_set():
            return
        if self.streams[stream].feed(chunk, self._now()) and not self.said_dropping:
            self.said_dropping = True
            log.info(
                "%s writes faster than the scheduler takes its output: the oldest unsent is "
                "dropped, a marker says how much (its report is whole)",
                self.job_id,
            )
        self.wake.set()

    async def finish(self) -> None:
        """The job ended: what is left is sent now, for at most FINAL_FLUSH_SECS (the report
        waits for it, no longer)."""
        if not self.ended.is_set():
            if not self.stopped:
                for stream in self.streams.values():
                    stream.feed(b"", self._now(), final=True)  # a character cut short: U+FFFD
            self.ended.set()
            self.wake.set()
        done, _ = await asyncio.wait({self.task}, timeout=FINAL_FLUSH_SECS)
        if done:
            return
        left = sum(stream.left() for stream in self.streams.values())
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        log.warning(
            "%s: gave up sending the last %d bytes of its output live after %g s (its report "
            "carries its output)",
            self.job_id,
            left,
            FINAL_FLUSH_SECS,
        )

    async def _send_all(self) -> None:
        try:
            while (stream := await self._next()) is not None:
                if not await self._send(stream):
                    self._stop()
                    return
        except Exception:  # a bug here must not touch the job or its report
            log.exception("live output of %s", self.job_id)
            self._stop()

    def _stop(self) -> None:
        self.stopped = True
        for stream in self.streams.values():
            stream.clear()

    async def _next(self) -> _Stream | None:
        """The stream to send next, once one is due; None when the job ended and all is sent."""
        while True:
            self.wake.clear()
            ended = self.ended.is_set()
            dues = [
                (when, stream.name)
                for stream in self.streams.values()
                if (when := stream.due(self.flush_secs, self.chunk_bytes, ended)) is not None
            ]
            if not dues:
                if ended:
                    return None
                await self.wake.wait()
                continue
            when, name = min(dues)
            delay = when - self._now()
            if delay <= 0:
                return self.streams[name]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), delay)

    async def _send(self, stream: _Stream) -> bool:
        """One chunk of `stream`, until the scheduler holds it; False when it takes no more."""
        stream.sending = stream.take(self.chunk_bytes, self._now())
        data = stream.sending.decode()
        failures = rebases = 0
        while True:
            sent = await send(self.remote, self.job_id, stream.name, stream.offset, data)
            if sent.what == "held":
                stream.offset, stream.sending = sent.offset, b""
                if failures:
                    log.info("%s: live output sent again", self.job_id)
                return True
            if sent.what == "rebase" and rebases < MAX_REBASES:
                rebases += 1
                log.info(
                    "%s: the scheduler holds %d bytes of its %s, not %d: sending on from there",
                    self.job_id,
                    sent.offset,
                    stream.name,
                    stream.offset,
                )
                stream.offset = sent.offset
                continue
            if sent.what != "retry":
                self._say_stopped(sent)
                return False
            failures += 1
            if failures == 1:
                log.warning(
                    "%s: live output failed (%s): sent again with backoff", self.job_id, sent.why
                )
            await self._backoff(failures)

    async def _backoff(self, failures: int) -> None:
        """Report's backoff; the job's end cuts it short once, for a prompt last attempt."""
        delay = min(self.backoff_secs * 2 ** (failures - 1), BACKOFF_CAP_SECS)
        if self.ended.is_set():
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ended.wait(), delay)

    def _say_stopped(self, sent: Sent) -> None:
        level = logging.INFO if sent.status in (404, 405) else logging.WARNING
        log.log(
            level,
            "%s: the scheduler takes no more of its output live (%s): its report carries it",
            self.job_id,
            sent.why,
        )
