"""What every answer under /ui carries, whatever answered it (a page, a redirect to the login
form, an error): no framing by another site (X-Frame-Options, CSP frame-ancestors: a page
of ours in an invisible frame cannot be clicked through), no caching (the pages show job
output and env_vars' names), and a policy that loads nothing but the page's own style and
posts forms only here."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.routing import UI_PREFIX

UI_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


class UIHeaders:
    """Pure ASGI middleware adding UI_HEADERS to every answer under /ui (the hot lane serves
    none of them)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ui(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in UI_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
