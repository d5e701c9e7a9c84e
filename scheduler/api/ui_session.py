"""The web UI's sessions and CSRF tokens.

With TINYAWS_API_KEY set, the login form starts a session: a random id (256 bits) in the
cookie, its SHA-256 in Redis with UI_SESSION_SECS of TTL (from the login, not renewed by
use), holding who logged in (the admin key, or a named key's name, role and key_id), so a session
works on every replica, ends at logout everywhere, and the cookie holds nothing derived
from the key. The cookie is HttpOnly, SameSite=Strict, and Secure when the
request came over https.

Every form that changes something carries a CSRF token bound to the session: an HMAC of its
id under the key. Without a key there is no login: the token is an HMAC under the
deployment's random secret (kept in Redis, made once, shared by every replica), so a page on
another site, which cannot read ours, cannot post a form that works. A posted form's Origin
must be absent or ours as well (ui_forms.py checks both). Neither needs more than the
store: BearerAuth (http.py) reads the session here.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from starlette.requests import Request, cookie_parser
from starlette.responses import Response
from starlette.types import Scope

from scheduler.api.client_address import parse_address, within
from scheduler.api.stores import Store
from scheduler.api.stores import settings as _settings
from scheduler.api.stores import store as _store
from scheduler.config.networks import Networks
from scheduler.models.access_key import Principal
from scheduler.store.scripts import access

UI_COOKIE = "tinyaws_ui"  # its value: the session's id
# secrets.token_urlsafe(32): 43 characters. Anything else (an old HMAC cookie, junk) is not
# a session, and costs no Redis call.
SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{43}")


def session_hash(session_id: str) -> str:
    """What Redis keeps of a session: its id's SHA-256, so a look at Redis opens no UI."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def cookie_session(headers: list[tuple[bytes, bytes]]) -> str:
    """The session id the request's first Cookie header carries, "" without one."""
    for name, value in headers:
        if name == b"cookie":
            found = cookie_parser(value.decode("latin-1")).get(UI_COOKIE, "")
            return found if SESSION_ID_RE.fullmatch(found) else ""
    return ""


async def session_of(store: Store, session_id: str) -> Principal | None:
    """Who the session logged in as, while Redis holds it (BearerAuth's rule for the UI's
    pages): one Redis call, none for no session."""
    if not session_id:
        return None
    return await store.run(access.session_alive(session_hash(session_id)))


async def end_session(store: Store, session_id: str) -> None:
    """The session deleted in Redis: its cookie stops working on every replica."""
    await store.run(access.end_session(session_hash(session_id)))


def over_https(scope: Scope, trusted: Networks) -> bool:
    """Whether the request came over https: the connection's scheme, or behind a load
    balancer in TRUSTED_PROXIES the last X-Forwarded-Proto it set (serve turns uvicorn's own
    proxy headers off: one rule, TRUSTED_PROXIES, for the lane and Starlette alike)."""
    if scope.get("scheme") == "https":
        return True
    client = scope.get("client")
    peer = parse_address(client[0] if client else None)
    if peer is None or not trusted or not within(peer, trusted):
        return False
    protos = [v for n, v in scope["headers"] if n == b"x-forwarded-proto"]
    return bool(protos) and protos[-1].split(b",")[-1].strip().lower() == b"https"


async def start(request: Request, response: Response, who: Principal) -> None:
    """A new session for a right key, `who` its key is: stored with its TTL, its id set as
    the cookie."""
    session_id = secrets.token_urlsafe(32)
    ttl = _settings(request).ui_session_secs
    await _store(request).run(access.start_session(session_hash(session_id), ttl, who))
    response.set_cookie(
        UI_COOKIE,
        session_id,
        max_age=int(ttl),
        httponly=True,
        samesite="strict",
        secure=over_https(request.scope, _settings(request).trusted_proxy_list),
    )


async def end(request: Request, response: Response) -> None:
    """Logout: the session is deleted in Redis (its cookie stops working everywhere)."""
    session_id = cookie_session(request.scope["headers"])
    if session_id:
        await end_session(_store(request), session_id)
    response.delete_cookie(UI_COOKIE, httponly=True, samesite="strict")


async def csrf(request: Request, fresh: bool = False) -> str:
    """The token a form that changes something must carry: an HMAC of the session's id under
    the key, or without a key of "" under the deployment's secret (`fresh`: read again from
    Redis rather than this process's copy)."""
    key = _settings(request).api_key
    if key:
        return _token(key, cookie_session(request.scope["headers"]))
    return _token(await _deployment_secret(request, fresh), "")


def _token(secret: str, session_id: str) -> str:
    message = f"tinyaws-ui-csrf:{session_id}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


async def _deployment_secret(request: Request, fresh: bool) -> str:
    """The no-key UI's secret, from Redis once per process (again when `fresh`: a Redis
    that lost its data makes a new one, which another replica may have made)."""
    state = request.app.state
    secret: str | None = getattr(state, "ui_secret", None)
    if secret is None or fresh:
        secret = await _store(request).run(access.ui_secret(secrets.token_hex(32)))
        state.ui_secret = secret
    return secret
