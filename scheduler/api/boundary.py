"""The browser boundary (docs/SECURITY.md): what a web page the operator visits cannot make
the API do, with or without a key.

A page elsewhere can make the browser send a "simple" POST (text/plain, a form, a Blob with
no type) to http://127.0.0.1:9001/jobs without asking first, and, on a name of its own that
it rebinds to 127.0.0.1 (DNS rebinding), read the answers. So, before routing:

- the Host must be one the operator allowed (ALLOWED_HOSTS, the loopback names, `serve`'s
  listen address): a rebound name is 400;
- a state-changing request (any method but GET, HEAD, OPTIONS) with an `Origin` must come
  from the API's own origin (the Origin's host and port are the Host's: the web UI's forms),
  and one whose `Sec-Fetch-Site` says another site sent it is refused (403);
- on a JSON route (every one but the web UI's forms) it must say `Content-Type:
  application/json` (415 otherwise), which a browser sends cross-origin only after a CORS
  preflight this API never grants. A request with neither Content-Type nor Origin nor
  Sec-Fetch-Site is no browser's (a browser sends Origin with every cross-origin POST) and
  passes: the original Go CLI's and lambda's requests, whose Content-Type is unknown.

One check (`Boundary.refusal`) over the raw headers serves both fronts: the ASGI middleware
(`BrowserBoundary`) and the hot lane (lane.Lane), so both answer alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.api.http import text_error
from scheduler.api.routing import UI_PREFIX
from scheduler.config import ANY_HOST, LOOPBACK_HOSTS, ConfigError, host_names

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What a browser's Sec-Fetch-Site says of a request the API's own pages (or the user, by
# typing a URL) made; "same-site" and "cross-site" are another origin's.
OWN_FETCH_SITES = frozenset({b"same-origin", b"none"})
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})
JSON = b"application/json"
# Host header values already judged (bounded: a stranger may send a new one each request).
KNOWN_HOSTS_MAX = 1024

Refusal = tuple[int, str]
BAD_HOST: Refusal = (400, "invalid Host header: not one of ALLOWED_HOSTS")
CROSS_ORIGIN: Refusal = (403, "cross-origin request refused")
NOT_JSON: Refusal = (415, "Content-Type must be application/json")


def with_listen_address(setting: str, listen: str) -> str:
    """ALLOWED_HOSTS as `scheduler serve --host LISTEN` applies it: with the listen address
    added, or "*" when it listens on every interface and the operator named no host. Such a
    server is reached by names it cannot know (a load balancer's, the host's LAN address),
    needs a key to start (or SERVE_INSECURE_NO_KEY), and whatever a rebound page could reach
    there anyone on that network reaches directly."""
    names = host_names(setting)
    address = listen.strip("[]").lower()
    if address in WILDCARD_ADDRESSES:
        return setting if names else ANY_HOST
    # An address no Host header can carry (a scoped IPv6 one) adds nothing.
    with contextlib.suppress(ConfigError):
        names |= host_names(address)
    return ",".join(sorted(names))


def host_of(value: bytes) -> str | None:
    """The host part of a Host header (lowercased, IPv6 without brackets), or None when the
    value is not `host[:port]`."""
    text = value.decode("latin-1").lower()
    if text.startswith("["):
        name, bracket, port = text[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return None
        port = port[1:]
    else:
        name, _, port = text.partition(":")
        if ":" in port:
            return None
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    return name or None


class Boundary:
    def __init__(self, allowed_hosts: str) -> None:
        names = host_names(allowed_hosts)
        self.any_host = ANY_HOST in names
        self.hosts = names | LOOPBACK_HOSTS
        self.known: dict[bytes, bool] = {}

    def host_allowed(self, value: bytes) -> bool:
        allowed = self.known.get(value)
        if allowed is None:
            allowed = self.any_host or host_of(value) in self.hosts
            if len(self.known) >= KNOWN_HOSTS_MAX:
                self.known.clear()
            self.known[value] = allowed
        return allowed

    def refusal(
        self, method: str, path: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> Refusal | None:
        """Why the request is refused before routing (status, message), or None. `headers`
        are the raw ones, names lowercased (uvicorn's, on both fronts)."""
        host = origin = fetch_site = content_type = None
        hosts = 0
        for name, value in headers:
            if name == b"host":
                hosts += 1
                host = value
            elif name == b"origin" and origin is None:
                origin = value
            elif name == b"sec-fetch-site" and fetch_site is None:
                fetch_site = value
            elif name == b"content-type" and content_type is None:
                content_type = value
        # No Host at all is an HTTP/1.0 client (a health check), never a browser.
        if hosts > 1 or (host is not None and not self.host_allowed(host)):
            return BAD_HOST
        if method in SAFE_METHODS:
            return None
        if origin is not None and not same_origin(origin, host):
            return CROSS_ORIGIN
        if fetch_site is not None and fetch_site.lower() not in OWN_FETCH_SITES:
            return CROSS_ORIGIN
        if path == UI_PREFIX or path.startswith(UI_PREFIX + "/"):
            return None  # the web UI's forms: their Origin was checked above
        if content_type is None:
            browser = origin is not None or fetch_site is not None
            return NOT_JSON if browser else None
        media_type = content_type.partition(b";")[0].strip().lower()
        return None if media_type == JSON else NOT_JSON


def same_origin(origin: bytes, host: bytes | None) -> bool:
    """The Origin is the API's own: http or https (a TLS proxy may sit in front) on the
    Host's own name and port. Another port of the same name is another server (the load
    balancer's services, a development server), whose pages are not the API's."""
    scheme, sep, authority = origin.lower().partition(b"://")
    if not sep or scheme not in (b"http", b"https") or host is None:
        return False
    return authority == host.lower()


class BrowserBoundary:
    """Pure ASGI middleware: `Boundary.refusal`'s answer, as text (errors.py's shape), before
    the key and the routes."""

    def __init__(self, app: ASGIApp, boundary: Boundary) -> None:
        self.app = app
        self.boundary = boundary

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.boundary.refusal(scope["method"], scope["path"], scope["headers"])
            if refused is not None:
                await text_error(*refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
