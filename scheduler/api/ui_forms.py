"""The web UI's posted forms: reading a small urlencoded body once its Origin and its CSRF
token (ui_session.py: bound to the session, never the key) are checked. A page on another
site can post a form here; without the token, or from its own Origin, it changes nothing.
And which buttons a page shows (`may_post`): those its viewer's role may press."""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs, urlsplit

import msgspec
from starlette.requests import Request

from scheduler.api.http import HTTPError, caller, read_body
from scheduler.api.routing import RouteTable
from scheduler.api.ui_session import csrf as csrf

FORM_BYTES = 4096  # a key, a token


class Button(msgspec.Struct):
    """A button's posted form, as its route is described (routes.TABLE, openapi.py): the
    page's CSRF token, which checked_form checks."""

    csrf: str


def may_post(request: Request, path: str) -> bool:
    """Whether the page's viewer may press the button posting to `path`: the role its route
    declares (routes.TABLE's Method.role, which the door holds the session to) against the
    caller's. A page shows no button its viewer may not press; a path no POST serves, none.
    Without a key, every caller is ANYONE: every button shows."""
    routes: RouteTable = request.app.state.routes
    resolved = routes.resolve("POST", path)
    method = resolved[1] if resolved is not None else None
    return method is not None and caller(request).allows(method.role)


async def form_lists(request: Request, limit: int = FORM_BYTES) -> dict[str, list[str]]:
    """A urlencoded form of at most `limit` bytes (413 past it): each name's values."""
    body = await read_body(request, limit)
    return parse_qs(body.decode("latin-1"), keep_blank_values=True)


async def checked_form(request: Request, limit: int = FORM_BYTES) -> dict[str, list[str]]:
    """The posted form, once its Origin (403 from another site) and its token (403 without
    the page's) are checked; from another site, not a byte of it is read."""
    check_origin(request)
    form = await form_lists(request, limit)
    await check_token(request, (form.get("csrf") or [""])[0])
    return form


async def check_token(request: Request, token: str) -> None:
    """403 unless `token` is the page's. Without a key, the deployment's secret is read
    from Redis again before refusing: another replica may have made a new one."""
    if hmac.compare_digest(token.encode(), (await csrf(request)).encode()):
        return
    again = not request.app.state.settings.api_key and await csrf(request, fresh=True)
    if not again or not hmac.compare_digest(token.encode(), again.encode()):
        raise HTTPError(403, "forbidden: the form's token is missing or stale")


def check_origin(request: Request) -> None:
    """403 for a form posted from another site: its Origin, when the browser sends one,
    must name this host (the Host header; http or https alike, a TLS proxy in front)."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = request.headers.get("host", "")
    if not host or _netloc(origin) not in (host.lower(), _without_default_port(host.lower())):
        raise HTTPError(403, "forbidden: the form was posted from another site")


def _netloc(origin: str) -> str:
    """An Origin's host[:port], its scheme's default port left out ("null": "")."""
    try:
        parts = urlsplit(origin.lower())
    except ValueError:  # "http://[x": no host of ours
        return ""
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    default = {"http": ":80", "https": ":443"}[parts.scheme]
    return parts.netloc.removesuffix(default)


def _without_default_port(host: str) -> str:
    return host.removesuffix(":80").removesuffix(":443")
