"""The web UI's posted forms: the CSRF token every form that changes something carries (an
HMAC of the key, never the key), and reading a small urlencoded body with that token
checked. A page on another site can post a form here; without the token it changes nothing."""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from starlette.requests import Request

from scheduler.api.http import HTTPError, read_body, ui_secret
from scheduler.api.state import settings as _settings

FORM_BYTES = 4096  # a key, a token


def csrf(request: Request) -> str:
    """The token a form that changes something must carry: an HMAC of the key (none needed
    without a key, when the API itself is open)."""
    key = _settings(request).api_key
    return ui_secret(key, "csrf") if key else ""


async def form_lists(request: Request, limit: int = FORM_BYTES) -> dict[str, list[str]]:
    """A urlencoded form of at most `limit` bytes (413 past it): each name's values."""
    body = await read_body(request, limit)
    return parse_qs(body.decode("latin-1"), keep_blank_values=True)


async def checked_form(request: Request, limit: int = FORM_BYTES) -> dict[str, list[str]]:
    """The posted form, once its token is checked (403 without the page's token)."""
    form = await form_lists(request, limit)
    token = (form.get("csrf") or [""])[0]
    if not hmac.compare_digest(token.encode(), csrf(request).encode()):
        raise HTTPError(403, "forbidden: the form's token is missing or stale")
    return form
