"""What every answer under /ui carries, whatever answered it (a page, a redirect to the login
form, an error): no framing by another site (X-Frame-Options, CSP frame-ancestors: a page
of ours in an invisible frame cannot be clicked through), no caching (the pages show job
output and env_vars' names), and a policy that loads nothing but the page's own style and
posts forms only here.

A page that refreshes itself runs one inline script: the refresh, which waits for the
reader (ui_refresh.py), and on the job page of an unfinished job its live output too, read
by an EventSource (ui_live.py). Its policy (`with_script`) adds that one inline script,
named by its SHA-256 (no other script, injected or not, runs: neither 'unsafe-inline' nor
a source), and connections to this origin only; every other directive is the UI's. The
middleware keeps a policy of that shape a page set, and puts the UI's on every other answer.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.routing import UI_PREFIX

CSP = "Content-Security-Policy"
POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
UI_HEADERS = {
    "X-Frame-Options": "DENY",
    CSP: POLICY,
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}
# The only policy a page may set instead of POLICY: with_script's.
_WITH_SCRIPT = re.compile(
    re.escape(POLICY) + r"; script-src 'sha256-[A-Za-z0-9+/]{43}='; connect-src 'self'"
)


@functools.cache  # a few scripts (ui_refresh.page_script): each hash worked out once
def with_script(script: str) -> str:
    """POLICY, and the one inline script `script` (its text exactly as the page holds it
    between <script> and </script>), which may connect to this origin only."""
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return f"{POLICY}; script-src 'sha256-{digest}'; connect-src 'self'"


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


class UIHeaders:
    """Pure ASGI middleware adding UI_HEADERS to every answer under /ui (the hot lane serves
    none of them); a page's own `with_script` policy is kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ui(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                scripted = _WITH_SCRIPT.fullmatch(headers.get(CSP, "")) is not None
                for name, value in UI_HEADERS.items():
                    if not (name == CSP and scripted):
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
