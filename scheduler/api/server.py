"""uvicorn's HTTP protocol (httptools), writing each response's head and body in one write.

Why: uvicorn writes the status line and headers when the app sends `http.response.start`,
then the body when it sends `http.response.body`: two writes, so two send() syscalls, for
every response. The API's responses are whole bodies with a Content-Length, so holding the
head until the body comes makes it one write. `scheduler serve` uses this protocol when
httptools is installed (docs/ARCHITECTURE.md, Performance, has the figures).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _HeadBuffer:
    """Stands in for the transport while uvicorn writes a response head."""

    __slots__ = ("head",)

    def __init__(self) -> None:
        self.head = b""

    def write(self, data: bytes) -> None:
        self.head += data


class OneWriteCycle(RequestResponseCycle):
    held_head = b""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            transport, buffer = self.transport, _HeadBuffer()
            self.transport = buffer  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = transport
            self.held_head = buffer.head
            return
        head, self.held_head = self.held_head, b""
        if head and message["type"] == "http.response.body":
            if self.chunked_encoding is False and self.scope["method"] != "HEAD":
                # uvicorn counts what it writes against the Content-Length: count the head in.
                self.expected_content_length += len(head)
                message = {**message, "body": head + message.get("body", b"")}
            elif not self.disconnected:
                self.transport.write(head)
        await super().send(message)


class OneWriteProtocol(HttpToolsProtocol):
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # uvicorn builds the cycle itself (no hook for its class); the subclass only
        # overrides `send`, so the instance can take it on before its task starts.
        cycle.__class__ = OneWriteCycle
        super()._start_asgi_task(cycle, app)
