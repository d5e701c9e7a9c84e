"""Errors under /ui as pages of the UI: the plain-text error any part of the app answers (a
handler's 404 or 400, a form's 403 without its token, the login's 429, the door's 400 for a
repeated parameter, Starlette's 404 and 405) is shown inside the layout, with the
navigation, its message escaped, its status and headers (Retry-After, Allow) kept.

Middleware, so every refusal is caught whoever answered it, and the rest of the app keeps
one way of failing (errors.py, the original's plain text); the API's own paths are not
touched."""

from __future__ import annotations

from html import escape
from http import HTTPStatus

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.ui_headers import is_ui
from scheduler.api.ui_layout import page

# The error's headers that the page does not make itself.
_OWN = ("content-type", "content-length")


def _is_text_error(message: Message) -> bool:
    if message["status"] < 400:
        return False
    kind = Headers(raw=message.get("headers", [])).get("content-type", "")
    return kind.startswith("text/plain")


def _title(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Error"


class UIErrors:
    """Pure ASGI middleware turning a plain-text error under /ui into a page of the UI."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ui(scope["path"]):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # the error's start, then its body's parts

        async def shown(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_text_error(message):
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await self._page(scope, receive, send, held)

        await self.app(scope, receive, shown)

    async def _page(self, scope: Scope, receive: Receive, send: Send, held: list[Message]) -> None:
        start, parts = held[0], held[1:]
        text = b"".join(part.get("body", b"") for part in parts).decode("utf-8", "replace")
        status: int = start["status"]
        # The login's own refusals (a form from another origin) are shown to someone not
        # logged in: no navigation, as the login page.
        request = Request(scope)
        outside = request.url.path == "/ui/login"
        back = "" if outside else '<p><a href="/ui/jobs">Back to the jobs</a></p>'
        body = f'<p class="error" id="error">{escape(text.rstrip())}</p>{back}'
        response = page(request, _title(status), body, status=status, navigation=not outside)
        for name, value in Headers(raw=start.get("headers", [])).items():
            if name not in _OWN:
                response.headers.append(name, value)
        await response(scope, receive, send)
