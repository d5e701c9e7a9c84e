"""One SSL context per configuration for the httpx clients of the test process.

httpx builds an SSL context for every client (httpx.get and friends make a client a call),
reading the whole CA bundle (SSL_CERT_FILE, or certifi's) each time: 30-45 ms of CPU on this
machine, for clients that speak plain HTTP to loopback. The suite made thousands (every
wait_http poll, every lane client, every worker context): minutes of CPU a run, on two
shared cores. An SSL context may serve any number of clients; sharing one per configuration
keeps every client's verification what it asked for. (httpcore sets a context's ALPN
protocols on each HTTPS connection from its client's http2 flag: no client here asks for
HTTP/2.) Only the test process is changed: the processes it starts build their own, as
deployed.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

from httpx._transports import default

_create = default.create_ssl_context


@functools.cache
def _shared(verify: bool, trust_env: bool, cert_file: str, cert_dir: str) -> ssl.SSLContext:
    # The environment's CA settings are part of the key: httpx reads them at each call.
    del cert_file, cert_dir
    return _create(verify=verify, cert=None, trust_env=trust_env)


def ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's create_ssl_context, shared for the plain cases (verify True or False, no client
    certificate); anything else is made as httpx makes it."""
    if cert is not None or not isinstance(verify, bool):
        return _create(verify=verify, cert=cert, trust_env=trust_env)
    env = os.environ
    return _shared(verify, trust_env, env.get("SSL_CERT_FILE", ""), env.get("SSL_CERT_DIR", ""))


def share_ssl_contexts() -> None:
    """Make every httpx transport of this process take its context from ssl_context."""
    default.create_ssl_context = ssl_context  # type: ignore[assignment]
